// Implementation of data/utf8.h. See NOTE [Invalid UTF-8 policy].
// Reference: Unicode 15, section 3.9, Table 3-7 (well-formed byte sequences).
#include "data/utf8.h"

#include <cstring>

namespace tripod::data {
namespace {

// Length of the well-formed sequence at s[i] (1..4), or -(bytes of the
// maximal ill-formed subpart) (at least 1) when it is not well formed.
int sequence_at(const unsigned char* s, size_t n, size_t i) {
  const unsigned c = s[i];
  if (c < 0x80) return 1;
  int need;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k <= need; ++k) {
    if (i + k >= n) return -k;
    const unsigned b = s[i + k];
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return -k;
  }
  return need + 1;
}

// Index of the first byte >= 0x80 from i (8 bytes at a time).
size_t skip_ascii(const unsigned char* s, size_t n, size_t i) {
  while (i + 8 <= n) {
    uint64_t w;
    std::memcpy(&w, s + i, 8);
    if (w & 0x8080808080808080ull) break;
    i += 8;
  }
  while (i < n && s[i] < 0x80) ++i;
  return i;
}

}  // namespace

bool is_valid_utf8(std::string_view sv) {
  const auto* s = reinterpret_cast<const unsigned char*>(sv.data());
  const size_t n = sv.size();
  size_t i = skip_ascii(s, n, 0);
  while (i < n) {
    const int k = sequence_at(s, n, i);
    if (k < 0) return false;
    i = skip_ascii(s, n, i + static_cast<size_t>(k));
  }
  return true;
}

std::string repair_utf8(std::string_view sv, int64_t* replaced) {
  const auto* s = reinterpret_cast<const unsigned char*>(sv.data());
  const size_t n = sv.size();
  std::string out;
  out.reserve(n + 16);
  int64_t count = 0;
  size_t i = 0;
  while (i < n) {
    const int k = sequence_at(s, n, i);
    if (k > 0) {
      out.append(sv.data() + i, static_cast<size_t>(k));
      i += static_cast<size_t>(k);
    } else {
      out += "\xEF\xBF\xBD";
      ++count;
      i += static_cast<size_t>(-k);
    }
  }
  if (replaced) *replaced = count;
  return out;
}

}  // namespace tripod::data
