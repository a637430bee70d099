// Implementation of data/gpt2_pretokenizer.h. ASCII is classified through a
// 128-entry table; other code points through the two-stage Unicode table.
#include "data/gpt2_pretokenizer.h"

#include <array>

#include "data/utf8.h"

namespace tripod::data {
namespace {

using unicode::CharClass;

constexpr std::array<CharClass, 128> make_ascii_classes() {
  std::array<CharClass, 128> t{};
  for (int c = 0; c < 128; ++c) {
    CharClass k = CharClass::kOther;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) k = CharClass::kLetter;
    if (c >= '0' && c <= '9') k = CharClass::kNumber;
    if (c == ' ' || (c >= '\t' && c <= '\r')) k = CharClass::kSpace;
    t[c] = k;
  }
  return t;
}
constexpr std::array<CharClass, 128> kAscii = make_ascii_classes();

// Class of the code point at s[i]; *len receives its length in bytes.
inline CharClass class_at(const unsigned char* s, size_t i, int* len,
                          const unicode::ClassTable& ct) {
  if (s[i] < 0x80) {
    *len = 1;
    return kAscii[s[i]];
  }
  return ct(decode_utf8(s + i, len));
}

// End of the run of characters of class `want` (or, for kOther, of any class
// but letter/number/space) starting at i.
inline size_t run_end(const unsigned char* s, size_t n, size_t i, CharClass want,
                      const unicode::ClassTable& ct) {
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {  // ASCII fast path: most text
      if (kAscii[c] != want) break;
      ++i;
      continue;
    }
    int len;
    if (ct(decode_utf8(s + i, &len)) != want) break;
    i += static_cast<size_t>(len);
  }
  return i;
}

// Length of a contraction ('s 't 're 've 'm 'll 'd) at s[i] == '\'', or 0.
inline size_t contraction(const unsigned char* s, size_t n, size_t i) {
  if (i + 1 >= n) return 0;
  const unsigned char a = s[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= n) return 0;
  const unsigned char b = s[i + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

}  // namespace

size_t gpt2_piece_end(const unsigned char* s, size_t n, size_t i, const unicode::ClassTable& ct) {
  if (s[i] == '\'') {
    if (size_t k = contraction(s, n, i)) return i + k;
  }
  int len;
  CharClass c = class_at(s, i, &len, ct);
  size_t start = i;
  if (s[i] == ' ' && i + 1 < n) {
    // " ?" of alternatives 2-4: the space leads a letter/number/other run.
    int len2;
    const CharClass next = class_at(s, i + 1, &len2, ct);
    if (next != CharClass::kSpace) {
      c = next;
      start = i + 1;
      len = len2;
    }
  }
  if (c != CharClass::kSpace) return run_end(s, n, start + static_cast<size_t>(len), c, ct);

  // White space run [i, end); `last` is the start of its last character.
  size_t end = i, last = i;
  while (end < n) {
    int l;
    if (class_at(s, end, &l, ct) != CharClass::kSpace) break;
    last = end;
    end += static_cast<size_t>(l);
  }
  if (end == n || last == i) return end;  // at the end, or a run of one (alternative 6)
  return last;                            // \s+(?!\S): leave the last one
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const unicode::ClassTable ct = unicode::class_table();
  for (size_t i = 0; i < text.size();) {
    const size_t j = gpt2_piece_end(s, text.size(), i, ct);
    pieces.push_back(text.substr(i, j - i));
    i = j;
  }
  return pieces;
}

}  // namespace tripod::data
