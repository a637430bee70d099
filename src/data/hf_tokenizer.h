// Hugging Face byte-level BPE tokenizers from a tokenizer.json file
// (--tokenizer-type HuggingFaceTokenizer --tokenizer-model tokenizer.json):
// GPT-2, Llama 3, Qwen2 and others of the same build. Offline: only the file.
//
// encode: repair invalid UTF-8 (data/utf8.h) -> the post-processor's prefix
// ids (e.g. Llama 3's <|begin_of_text|>) -> split off added tokens, matched
// verbatim, leftmost-longest (e.g. <|im_start|>) -> normalize the rest (none
// or NFC) -> pre-tokenize (data/hf_pretokenizer.h) -> for each piece, its id
// when ignore_merges is set and the piece is a token, else byte-level BPE
// (data/byte_bpe.h; merge r is model.merges[r], a later repeat wins) -> the
// post-processor's suffix ids.
//
// What tokenizer.json may hold (anything else is refused, naming the file
// and the component):
//   model          BPE with vocab, merges ("a b" or ["a", "b"]), ignore_merges;
//                  no dropout, byte_fallback, subword prefix or suffix
//   normalizer     null, NFC (needs a build with ICU), or a Sequence of those
//   pre_tokenizer  ByteLevel (use_regex true, GPT-2's pattern), or
//                  Sequence[Split(Regex P, Isolated), ByteLevel(use_regex false)]
//                  with P one of data/hf_pretokenizer.h's patterns
//   post_processor null, ByteLevel, TemplateProcessing (special tokens around
//                  $A), or a Sequence of those
//   decoder        null or ByteLevel
//   added_tokens   content, id, lstrip, rstrip, normalized; not single_word
//
// End of document (--append-eod, generate's stop token): the first added
// token of <|end_of_text|> (Llama 3), <|endoftext|> (GPT-2, Qwen2), </s>,
// <eos>.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/byte_bpe.h"
#include "data/hf_pretokenizer.h"
#include "data/tokenizer.h"

namespace tripod::data {

class HuggingFaceTokenizer final : public Tokenizer {
 public:
  explicit HuggingFaceTokenizer(const std::string& path);
  ~HuggingFaceTokenizer() override;

  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_bytes_.size()); }
  int32_t eod() const override;
  void encode(std::string_view text, std::vector<int32_t>* out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  std::string describe() const override;

  HfPattern pattern() const { return pattern_; }
  // Id of an added token by its content, or -1.
  int32_t added_token_id(std::string_view content) const;

 private:
  struct AddedTokens;
  struct AddedToken {
    std::string content;
    int32_t id;
    bool lstrip, rstrip, normalized;
  };
  void load(const std::string& path);
  void encode_valid(std::string_view text, std::vector<int32_t>* out) const;
  // Text between added tokens: normalize, then normalized added tokens, then pieces.
  void encode_segment(std::string_view seg, std::vector<int32_t>* out) const;
  void encode_pieces(std::string_view seg, std::vector<int32_t>* out) const;

  std::string path_;
  HfPattern pattern_ = HfPattern::kGpt2;
  bool nfc_ = false, add_prefix_space_ = false, ignore_merges_ = false;
  std::vector<std::string> id_to_bytes_;  // (V,) raw bytes of each id
  std::vector<char> id_known_;            // (V,) ids that name a token
  std::vector<AddedToken> added_;
  std::unique_ptr<AddedTokens> raw_added_, normalized_added_;
  std::vector<int32_t> prefix_ids_, suffix_ids_;  // post-processor template around $A
  int32_t eod_ = -1;
  std::string eod_name_;
  std::unique_ptr<ByteBpe> bpe_;
};

}  // namespace tripod::data
