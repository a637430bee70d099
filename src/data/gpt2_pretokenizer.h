// GPT-2's pre-tokenizer without a regex engine. It splits valid UTF-8 text
// exactly as the JavaScript regex (flags /gu) of the reference encoder
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// does, alternative by alternative:
//   1. an ASCII apostrophe followed by s, t, re, ve, m, ll or d (lower case);
//   2-4. an optional U+0020 and a maximal run of letters, of numbers, or of
//      "other" characters (neither letter, number nor white space);
//   5-6. a run of white space; when a non-space follows it, the run gives up
//      its last character (that one then leads the next piece as " ?"), except
//      a run of one character, which is taken whole by alternative 6.
// Character classes: data/unicode_class.h.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "data/unicode_class.h"

namespace tripod::data {

// End (exclusive byte index) of the piece that starts at byte i < n of the
// valid UTF-8 text s[0, n).
size_t gpt2_piece_end(const unsigned char* s, size_t n, size_t i, const unicode::ClassTable& ct);

// All pieces of text (valid UTF-8), for tests and tools.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

}  // namespace tripod::data
