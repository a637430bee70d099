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

constexpr std::string_view kMistralNemoRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

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

inline int utf8_length(unsigned char lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

// ---- Mistral-Nemo: letters by case ----

using unicode::CaseKind;

inline CaseKind kind_at(const unsigned char* s, size_t i, const unicode::CaseTable& kt) {
  const unsigned char c = s[i];
  if (c < 0x80) return c >= 'A' && c <= 'Z' ? CaseKind::kUpper : c >= 'a' && c <= 'z' ? CaseKind::kLower : CaseKind::kNone;
  int len;
  return kt(decode_utf8(s + i, &len));
}
inline bool in_upper(CaseKind k) { return k == CaseKind::kUpper || k == CaseKind::kBoth; }  // [Lu Lt Lm Lo M]
inline bool in_lower(CaseKind k) { return k == CaseKind::kLower || k == CaseKind::kBoth; }  // [Ll Lm Lo M]

constexpr size_t kNoMatch = ~size_t{0};

// End of `U*L+` at j, or kNoMatch. U* takes the run of U characters; if L+
// cannot start after it, U* gives characters back until one that is also in
// L (Lm, Lo, M) ends it, and L+ is that one character.
size_t upper_star_lower_plus(const unsigned char* s, size_t n, size_t j, const unicode::CaseTable& kt) {
  size_t p = j, last_both_end = kNoMatch;
  while (p < n) {
    const CaseKind k = kind_at(s, p, kt);
    if (!in_upper(k)) break;
    p += static_cast<size_t>(utf8_length(s[p]));
    if (k == CaseKind::kBoth) last_both_end = p;
  }
  if (p < n && in_lower(kind_at(s, p, kt))) {
    while (p < n && in_lower(kind_at(s, p, kt))) p += static_cast<size_t>(utf8_length(s[p]));
    return p;
  }
  return last_both_end;
}

// End of `U+L*` at j, or kNoMatch.
size_t upper_plus_lower_star(const unsigned char* s, size_t n, size_t j, const unicode::CaseTable& kt) {
  size_t p = j;
  while (p < n && in_upper(kind_at(s, p, kt))) p += static_cast<size_t>(utf8_length(s[p]));
  if (p == j) return kNoMatch;
  while (p < n && in_lower(kind_at(s, p, kt))) p += static_cast<size_t>(utf8_length(s[p]));
  return p;
}

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

size_t other_or_space_end(const unsigned char* s, size_t n, size_t i, CharClass c,
                          const unicode::ClassTable& ct, bool slash);

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
  return other_or_space_end(s, n, i, c, ct, /*slash=*/false);
}

// Alternatives 4-7 of kLlama3/kQwen2/kMistralNemo at i, whose class is c:
// ` ?[^\s\p{L}\p{N}]+[\r\n]*` (kMistralNemo: `[\r\n/]*`), `\s*[\r\n]+`,
// `\s+(?!\S)`, `\s+`.
size_t other_or_space_end(const unsigned char* s, size_t n, size_t i, CharClass c,
                          const unicode::ClassTable& ct, bool slash) {
  const size_t after = i + static_cast<size_t>(utf8_length(s[i]));
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
    while (j < n && (is_crlf(s[j]) || (slash && s[j] == '/'))) ++j;
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

size_t nemo_piece_end(const unsigned char* s, size_t n, size_t i, const unicode::ClassTable& ct) {
  static const unicode::CaseTable kt = unicode::case_table();
  int len;
  const CharClass c = class_at(s, i, &len, ct);
  const size_t after = i + static_cast<size_t>(len);
  // [^\r\n\p{L}\p{N}]? is tried with the character first, then without.
  const bool lead = c != CharClass::kLetter && c != CharClass::kNumber && !is_crlf(s[i]);
  for (auto words : {upper_star_lower_plus, upper_plus_lower_star}) {  // 1, 2
    if (lead && after < n) {
      if (size_t e = words(s, n, after, kt); e != kNoMatch) return e;
    }
    if (size_t e = words(s, n, i, kt); e != kNoMatch) return e;
  }
  if (c == CharClass::kNumber) return after;  // 3
  return other_or_space_end(s, n, i, c, ct, /*slash=*/true);
}

}  // namespace

std::optional<HfPattern> hf_pattern_from_regex(std::string_view regex) {
  for (HfPattern p : {HfPattern::kGpt2, HfPattern::kLlama3, HfPattern::kQwen2, HfPattern::kMistralNemo})
    if (regex == hf_pattern_regex(p)) return p;
  return std::nullopt;
}

std::string_view hf_pattern_regex(HfPattern p) {
  switch (p) {
    case HfPattern::kGpt2: return kGpt2Regex;
    case HfPattern::kLlama3: return kLlama3Regex;
    case HfPattern::kQwen2: return kQwen2Regex;
    case HfPattern::kMistralNemo: return kMistralNemoRegex;
  }
  return {};
}

const char* hf_pattern_name(HfPattern p) {
  switch (p) {
    case HfPattern::kGpt2: return "GPT-2";
    case HfPattern::kLlama3: return "Llama 3";
    case HfPattern::kQwen2: return "Qwen2";
    case HfPattern::kMistralNemo: return "Mistral-Nemo";
  }
  return "?";
}

size_t hf_piece_end(HfPattern p, const unsigned char* s, size_t n, size_t i,
                    const unicode::ClassTable& ct) {
  switch (p) {
    case HfPattern::kGpt2: return gpt2_piece_end(s, n, i, ct);
    case HfPattern::kLlama3: return llama3_piece_end(s, n, i, ct, 3);
    case HfPattern::kQwen2: return llama3_piece_end(s, n, i, ct, 1);
    case HfPattern::kMistralNemo: return nemo_piece_end(s, n, i, ct);
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
