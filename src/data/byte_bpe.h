// Byte-level BPE over token ids, shared by GPT2BPETokenizer (data/gpt2_bpe.h)
// and HuggingFaceTokenizer (data/hf_tokenizer.h): every byte is a token, and
// merge r turns the id pair (a, b) into the id of the concatenated token; the
// pair of lowest rank is merged first, leftmost first among equal ranks (the
// GPT-2 reference merges every occurrence of the best pair left to right in
// one pass, and Hugging Face's BPE pops (rank, position) from a heap: the
// same result, because a merge's result never takes part in a merge of lower
// rank).
//
// Usage (one pre-tokenized piece at a time):
//   ByteBpe bpe(byte_id, merges);                  // merges in rank order
//   ByteBpe::Cache& cache = bpe.thread_cache();    // once per encode() call
//   n = bpe.encode_piece(p, len, dst, cache);      // dst has room for len + kMaxCachedIds ids
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tripod::data {

class ByteBpe {
 public:
  struct Merge {
    int32_t a, b, id;  // ids of the left, right and merged token
  };
  // Bounded direct-mapped per-thread cache: piece bytes (<= kMaxCachedKey)
  // -> ids (<= kMaxCachedIds). A new piece evicts whatever shared its slot,
  // so memory is fixed (2 MiB per thread and tokenizer in use).
  static constexpr size_t kMaxCachedKey = 24, kMaxCachedIds = 9;
  struct Cache;

  // byte_id: the id of each single-byte token. merges: in rank order; when a
  // pair repeats, `keep_last_duplicate` picks the later rank (Hugging Face
  // builds a map from the list, so the last one wins) or the first (GPT-2).
  ByteBpe(const int32_t byte_id[256], const std::vector<Merge>& merges, bool keep_last_duplicate);
  ~ByteBpe();

  // ignore_merges (Hugging Face BPE option): a whole piece that is a token of
  // `vocab` (raw bytes -> id) is that token, without merging.
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;
  void set_whole_piece_vocab(Vocab vocab);

  int32_t byte_id(uint8_t b) const { return byte_id_[b]; }
  int64_t merge_count() const { return merge_count_; }

  // BPE of one piece without the cache (the readable reference path).
  void bpe(std::string_view piece, std::vector<int32_t>* out) const;

  // This thread's cache, emptied when it last served another ByteBpe.
  Cache& thread_cache() const;
  // Ids of the piece p[0, len) (len >= 1) written to dst; returns their
  // number. dst must have room for max(len, kMaxCachedIds) ids.
  size_t encode_piece(const unsigned char* p, size_t len, int32_t* dst, Cache& cache) const;

 private:
  struct MergeTable;
  const int32_t* whole_piece(const unsigned char* p, size_t n) const;
  // Writes the ids of a piece of n <= 64 bytes to ids[0, return value).
  size_t bpe_short(const unsigned char* p, size_t n, int32_t* ids) const;
  void bpe_long(const unsigned char* p, size_t n, std::vector<int32_t>* out) const;

  int32_t byte_id_[256];
  int64_t merge_count_ = 0;
  std::unique_ptr<MergeTable> merges_;
  Vocab whole_;                                     // empty unless ignore_merges
  uint64_t instance_;                               // tags the per-thread caches
};

}  // namespace tripod::data
