// GPT-2 byte-level BPE (Radford et al. 2019; the reference is OpenAI's
// encoder.py and its JavaScript port gpt-3-encoder), Megatron's
// GPT2BPETokenizer.
//
// encode: repair invalid UTF-8 (data/utf8.h) -> pre-tokenize
// (data/gpt2_pretokenizer.h) -> for each piece, its ids from a per-thread
// cache or from BPE over its bytes. BPE works on ids: every byte is a token,
// and merge r of vocab.bpe turns the id pair (a, b) into the id of the
// concatenated token; the pair of lowest rank is merged first, leftmost
// first among equal ranks (the reference merges every occurrence of the best
// pair left to right in one pass, which is the same thing because a merge's
// result never takes part in a merge of lower rank).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace tripod::data {

// GPT-2's reversible byte <-> printable code point table (bytes_to_unicode).
uint32_t gpt2_byte_to_unicode(uint8_t byte);

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
  struct MergeTable;
  void encode_valid(std::string_view text, std::vector<int32_t>* out) const;
  // Writes the ids of a piece of n <= 64 bytes to ids[0, return value).
  size_t bpe_short(const unsigned char* p, size_t n, int32_t* ids) const;
  void bpe_long(const unsigned char* p, size_t n, std::vector<int32_t>* out) const;

  std::string vocab_file_;
  std::vector<std::string> id_to_bytes_;  // (V,) raw bytes of each token
  int32_t byte_id_[256];                  // id of each single-byte token
  int32_t eod_ = -1;
  std::unique_ptr<MergeTable> merges_;
  uint64_t instance_;                     // tags the per-thread caches
};

}  // namespace tripod::data
