// UTF-8 validation and repair for tokenizer input.
//
// NOTE [Invalid UTF-8 policy]
// Tokenizers see valid UTF-8 only. Each maximal ill-formed subsequence (as
// defined by Unicode 3.9 "U+FFFD substitution of maximal subparts", which is
// what the WHATWG decoder in node and Python's errors="replace" do) becomes
// one U+FFFD (bytes EF BF BD). So a file with stray Latin-1 bytes tokenizes
// exactly as the reference encoder does after node reads it as UTF-8.
// `tripod preprocess` counts the documents that needed repair and reports it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tripod::data {

// True when s is well-formed UTF-8 (no surrogates, no overlongs, <= U+10FFFF).
bool is_valid_utf8(std::string_view s);
// s with every maximal ill-formed subsequence replaced by U+FFFD; *replaced
// (if given) receives the number of replacements.
std::string repair_utf8(std::string_view s, int64_t* replaced = nullptr);

// Decodes the code point at s[i] of *valid* UTF-8; *len receives its bytes.
inline uint32_t decode_utf8(const unsigned char* s, int* len) {
  const uint32_t c = s[0];
  if (c < 0x80) { *len = 1; return c; }
  if (c < 0xE0) { *len = 2; return ((c & 0x1F) << 6) | (s[1] & 0x3F); }
  if (c < 0xF0) { *len = 3; return ((c & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F); }
  *len = 4;
  return ((c & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) | (s[3] & 0x3F);
}

}  // namespace tripod::data
