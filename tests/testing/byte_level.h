// The byte-level spelling of raw bytes (GPT-2's byte-to-unicode alphabet),
// as vocab.json and tokenizer.json write tokens: for tests that build
// tokenizer files by hand.
#pragma once

#include <cstdint>
#include <string>

#include "data/gpt2_bpe.h"

namespace tripod::testing {

inline std::string spelled(const std::string& raw) {
  std::string s;
  for (unsigned char b : raw) {
    const uint32_t cp = data::gpt2_byte_to_unicode(b);
    if (cp < 0x80) s += static_cast<char>(cp);
    else s += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
  }
  return s;
}

}  // namespace tripod::testing
