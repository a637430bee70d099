// Implementation of data/hf_pretokenizer.h.
#include "data/hf_pretokenizer.h"

#include "data/gpt2_pretokenizer.h"
#include "data/utf8.h"

namespace tripod::data {
namespace {

using unicode::CharClass;

constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// ASCII classes are the same in every flavour (\s: \t \n \v \f \r and space).
inline CharClass class_at(const unsigned char* s, size_t i, int* len, const unicode::ClassTable& ct) {
  const unsigned char c = s[i];
  if (c < 0x80) {
    *len = 1;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return CharClass::kLetter;
    if (c >= '0' && c <= '9') return CharClass::kNumber;
    if (c == ' ' || (c >= '\t' && c <= '\r')) return CharClass::kSpace;
    return CharClass::kOther;
  }
  return ct(decode_utf8(s + i, len));
}

inline size_t run_end(const unsigned char* s, size_t n, size_t i, CharClass want,
                      const unicode::ClassTable& ct) {
  while (i < n) {
    int len;
    if (class_at(s, i, &len, ct) != want) break;
    i += static_cast<size_t>(len);
  }
  return i;
}

inline bool is_crlf(unsigned char c) { return c == '\r' || c == '\n'; }

// Length of a case-insensitive contraction at s[i] == '\'', or 0.
size_t contraction_ci(const unsigned char* s, size_t n, size_t i) {
  if (i + 1 >= n) return 0;
  const unsigned char a = s[i + 1] | 0x20;  // ASCII lower case (letters only below)
  if (s[i + 1] == 0xC5 && i + 2 < n && s[i + 2] == 0xBF) return 3;  // U+017F folds to s
  if (s[i + 1] >= 0x80) return 0;
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= n || s[i + 2] >= 0x80) return 0;
  const unsigned char b = s[i + 2] | 0x20;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

size_t llama3_piece_end(const unsigned char* s, size_t n, size_t i, const unicode::ClassTable& ct,
                        int max_digits) {
  if (s[i] == '\'') {  // 1
    if (size_t k = contraction_ci(s, n, i)) return i + k;
  }
  int len;
  const CharClass c = class_at(s, i, &len, ct);
  const size_t after = i + static_cast<size_t>(len);
  if (c == CharClass::kLetter) return run_end(s, n, after, CharClass::kLetter, ct);  // 2, no prefix
  if (c != CharClass::kNumber && !is_crlf(s[i]) && after < n) {                    // 2, a prefix
    int len2;
    if (class_at(s, after, &len2, ct) == CharClass::kLetter)
      return run_end(s, n, after + static_cast<size_t>(len2), CharClass::kLetter, ct);
  }
  if (c == CharClass::kNumber) {  // 3
    size_t j = after;
    for (int k = 1; k < max_digits && j < n; ++k) {
      int l;
      if (class_at(s, j, &l, ct) != CharClass::kNumber) break;
      j += static_cast<size_t>(l);
    }
    return j;
  }
  size_t start = i;  // 4
  CharClass oc = c;
  if (s[i] == ' ' && after < n) {
    int len2;
    if (class_at(s, after, &len2, ct) == CharClass::kOther) {
      oc = CharClass::kOther;
      start = after;
    }
  }
  if (oc == CharClass::kOther) {
    int l;
    class_at(s, start, &l, ct);
    size_t j = run_end(s, n, start + static_cast<size_t>(l), CharClass::kOther, ct);
    while (j < n && is_crlf(s[j])) ++j;
    return j;
  }
  // White space run [i, end): `last` starts its last character, `last_nl` is
  // its last \r or \n.
  size_t end = i, last = i, last_nl = n;
  while (end < n) {
    int l;
    if (class_at(s, end, &l, ct) != CharClass::kSpace) break;
    if (is_crlf(s[end])) last_nl = end;
    last = end;
    end += static_cast<size_t>(l);
  }
  if (last_nl != n) return last_nl + 1;   // 5
  if (end == n || last == i) return end;  // 7 (or 6 at the end of the text)
  return last;                            // 6: \s+(?!\S) leaves the last one
}

}  // namespace

std::optional<HfPattern> hf_pattern_from_regex(std::string_view regex) {
  for (HfPattern p : {HfPattern::kGpt2, HfPattern::kLlama3, HfPattern::kQwen2})
    if (regex == hf_pattern_regex(p)) return p;
  return std::nullopt;
}

std::string_view hf_pattern_regex(HfPattern p) {
  switch (p) {
    case HfPattern::kGpt2: return kGpt2Regex;
    case HfPattern::kLlama3: return kLlama3Regex;
    case HfPattern::kQwen2: return kQwen2Regex;
  }
  return {};
}

const char* hf_pattern_name(HfPattern p) {
  switch (p) {
    case HfPattern::kGpt2: return "GPT-2";
    case HfPattern::kLlama3: return "Llama 3";
    case HfPattern::kQwen2: return "Qwen2";
  }
  return "?";
}

size_t hf_piece_end(HfPattern p, const unsigned char* s, size_t n, size_t i,
                    const unicode::ClassTable& ct) {
  switch (p) {
    case HfPattern::kGpt2: return gpt2_piece_end(s, n, i, ct);
    case HfPattern::kLlama3: return llama3_piece_end(s, n, i, ct, 3);
    case HfPattern::kQwen2: return llama3_piece_end(s, n, i, ct, 1);
  }
  return n;
}

std::vector<std::string_view> hf_pretokenize(HfPattern p, std::string_view text) {
  std::vector<std::string_view> pieces;
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const unicode::ClassTable ct = unicode::oniguruma_class_table();
  for (size_t i = 0; i < text.size();) {
    const size_t j = hf_piece_end(p, s, text.size(), i, ct);
    pieces.push_back(text.substr(i, j - i));
    i = j;
  }
  return pieces;
}

}  // namespace tripod::data
