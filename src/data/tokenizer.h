// Tokenizers for `tripod preprocess` and `tripod generate`: GPT-2 byte-level
// BPE, SentencePiece and Hugging Face byte-level BPE (tokenizer.json), behind
// one interface named as Megatron names them (--tokenizer-type
// GPT2BPETokenizer | SentencePieceTokenizer | HuggingFaceTokenizer).
//
// Contract: encode() and decode() are const and thread-safe (preprocess calls
// them from --workers threads at once). encode() appends ids to *out and
// never adds the end-of-document id; the caller appends eod() (--append-eod).
// (A HuggingFaceTokenizer adds what its post-processor template puts around
// the text, e.g. Llama 3's <|begin_of_text|>, as Megatron's does.)
// Input that is not valid UTF-8 is repaired first, see NOTE [Invalid UTF-8
// policy] in data/utf8.h.
//
// Usage:
//   TokenizerConfig c;
//   c.type = "GPT2BPETokenizer"; c.vocab_file = ".../encoder.json"; c.merge_file = ".../vocab.bpe";
//   auto tok = make_tokenizer(c);
//   std::vector<int32_t> ids;
//   tok->encode("Hello world", &ids);   // {15496, 995}
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tripod::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual int64_t vocab_size() const = 0;  // unpadded
  virtual int32_t eod() const = 0;         // end-of-document id
  virtual void encode(std::string_view text, std::vector<int32_t>* out) const = 0;
  // The bytes of the ids, concatenated (may be invalid UTF-8 when the ids cut a character).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual std::string describe() const = 0;
};

struct TokenizerConfig {
  std::string type;            // GPT2BPETokenizer | SentencePieceTokenizer | HuggingFaceTokenizer
  std::string vocab_file;      // GPT-2: encoder.json (gpt2-vocab.json)
  std::string merge_file;      // GPT-2: vocab.bpe (gpt2-merges.txt)
  std::string tokenizer_model; // SentencePiece: .model file; HuggingFaceTokenizer: tokenizer.json
};

// config.type may be any of Megatron-LM's --tokenizer-type names that map
// onto these (tokenizer_type_for); a mapped name is logged once per call.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerConfig& config);

// Megatron-LM's --tokenizer-type names -> the tokenizer tripod runs for them
// (GPT2BPETokenizer, SentencePieceTokenizer, HuggingFaceTokenizer or
// NullTokenizer). Megatron-Core reads SentencePieceTokenizer,
// GPTSentencePieceTokenizer and Llama2Tokenizer with one SentencePiece
// wrapper (no <s> added, eod = </s>), so all three are tripod's
// SentencePieceTokenizer. The names tripod cannot serve (Llama3Tokenizer,
// TikTokenizer, the BERT, multimodal and SFT tokenizers) throw an Error
// naming what to use instead; an unknown name lists the accepted ones.
std::string tokenizer_type_for(const std::string& megatron_name);

// --tokenizer-type when only files are given: HuggingFaceTokenizer for a
// --tokenizer-model ending in .json or a folder holding tokenizer.json,
// SentencePieceTokenizer for another
// --tokenizer-model, else GPT2BPETokenizer.
std::string default_tokenizer_type(const std::string& tokenizer_model);

}  // namespace tripod::data
