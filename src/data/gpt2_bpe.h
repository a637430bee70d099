// GPT-2 byte-level BPE (Radford et al. 2019; the reference is OpenAI's
// encoder.py and its JavaScript port gpt-3-encoder), Megatron's
// GPT2BPETokenizer.
//
// encode: repair invalid UTF-8 (data/utf8.h) -> pre-tokenize
// (data/gpt2_pretokenizer.h) -> for each piece, its ids from a per-thread
// cache or from BPE over its bytes (data/byte_bpe.h; merge r is line r of
// vocab.bpe).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/byte_bpe.h"
#include "data/tokenizer.h"

namespace tripod::data {

// GPT-2's reversible byte <-> printable code point table (bytes_to_unicode).
uint32_t gpt2_byte_to_unicode(uint8_t byte);
// Raw bytes of a token written in that alphabet (vocab and merges files);
// false when s has a character outside it.
bool gpt2_token_bytes(std::string_view s, std::string* out);

class GPT2BPETokenizer final : public Tokenizer {
 public:
  GPT2BPETokenizer(const std::string& vocab_file, const std::string& merge_file);
  ~GPT2BPETokenizer() override;

  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_bytes_.size()); }
  int32_t eod() const override { return eod_; }
  void encode(std::string_view text, std::vector<int32_t>* out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  std::string describe() const override;

  // BPE of one piece without the cache (the readable reference path).
  void bpe(std::string_view piece, std::vector<int32_t>* out) const;

 private:
  void encode_valid(std::string_view text, std::vector<int32_t>* out) const;

  std::string vocab_file_;
  std::vector<std::string> id_to_bytes_;  // (V,) raw bytes of each token
  int32_t eod_ = -1;
  std::unique_ptr<ByteBpe> bpe_;
};

}  // namespace tripod::data
