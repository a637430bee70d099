// The pre-tokenizer patterns of Hugging Face byte-level BPE tokenizers
// (tokenizer.json "pre_tokenizer"), recognised by their exact text and run
// by hand like GPT-2's (data/gpt2_pretokenizer.h), without a regex engine.
// Classes follow Oniguruma, the engine Hugging Face tokenizers uses
// (unicode::oniguruma_class_table: \s is Unicode White_Space).
//
//   kGpt2   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//           (the ByteLevel pre-tokenizer's own pattern, use_regex true)
//   kLlama3 (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+        (Llama 3)
//   kQwen2  the same with \p{N} in place of \p{N}{1,3}                (Qwen2, Qwen2.5)
//
// kLlama3/kQwen2, alternative by alternative at a position i:
//   1. an ASCII apostrophe and s, t, re, ve, m, ll or d in either case (also
//      U+017F, whose case fold is s);
//   2. one optional character that is not \r, \n, a letter or a number, then
//      a maximal run of letters;
//   3. one to three numbers (kQwen2: one);
//   4. an optional U+0020, a maximal run of "other" characters (neither
//      letter, number nor white space), then any run of \r and \n;
//   5. white space up to and including its last \r or \n;
//   6-7. white space as in GPT-2: a run followed by a non-space gives up its
//      last character, unless it has only one.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "data/unicode_class.h"

namespace tripod::data {

enum class HfPattern { kGpt2, kLlama3, kQwen2 };

// The pattern whose regex text is exactly `regex`, or none.
std::optional<HfPattern> hf_pattern_from_regex(std::string_view regex);
std::string_view hf_pattern_regex(HfPattern p);
const char* hf_pattern_name(HfPattern p);

// End (exclusive byte index) of the piece that starts at byte i < n of the
// valid UTF-8 text s[0, n); ct: unicode::oniguruma_class_table().
size_t hf_piece_end(HfPattern p, const unsigned char* s, size_t n, size_t i,
                    const unicode::ClassTable& ct);

// All pieces of text (valid UTF-8), for tests and tools.
std::vector<std::string_view> hf_pretokenize(HfPattern p, std::string_view text);

}  // namespace tripod::data
