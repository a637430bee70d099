// Character classes of GPT-2's pre-tokenizer pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with JavaScript /u semantics (what the reference encoder runs): letters
// (\p{L}), numbers (\p{N}), white space (\s: Unicode White_Space without
// U+0085, plus U+FEFF) and everything else. The range tables are generated
// from node's ICU by tools/gen_unicode_tables.js (unicode_tables.cpp).
#pragma once

#include <cstdint>

namespace tripod::data::unicode {

struct CodePointRange {
  uint32_t first, last;  // inclusive
};

extern const char* const kTableUnicodeVersion;
extern const CodePointRange kLetterRanges[];
extern const int kLetterRangeCount;
extern const CodePointRange kNumberRanges[];
extern const int kNumberRangeCount;
extern const CodePointRange kSpaceRanges[];
extern const int kSpaceRangeCount;

enum class CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

// O(1): a two-stage table (256-code-point blocks, identical blocks shared)
// built from the ranges on first use.
CharClass classify(uint32_t cp);

// The same table for hot loops: class = stage2[(stage1[cp >> 8] << 8) | (cp & 255)].
struct ClassTable {
  const uint16_t* stage1;
  const uint8_t* stage2;
  CharClass operator()(uint32_t cp) const {
    return static_cast<CharClass>(stage2[(static_cast<uint32_t>(stage1[cp >> 8]) << 8) | (cp & 255)]);
  }
};
ClassTable class_table();  // cp must be <= 0x10FFFF

// \s differs between regex engines: Oniguruma (what Hugging Face tokenizers
// runs its pre-tokenizer patterns with) and Rust's char::is_whitespace take
// Unicode White_Space, so U+0085 is white space and U+FEFF is not; JavaScript
// takes U+FEFF and not U+0085. Letters and numbers are the same.
ClassTable oniguruma_class_table();

}  // namespace tripod::data::unicode
