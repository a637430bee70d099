// Implementation of data/sp_tokenizer.h over sentencepiece_processor.h.
#include "data/sp_tokenizer.h"

#include <sentencepiece_processor.h>

#include "base/error.h"
#include "data/utf8.h"

namespace tripod::data {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& model_file) : model_file_(model_file) {
    const auto status = sp_.Load(model_file);
    TRIPOD_CHECK_HINT(status.ok(), "pass a model written by spm_train (--model_prefix M -> M.model)",
                      "cannot load --tokenizer-model {}: {}", model_file, status.ToString());
  }
  int64_t vocab_size() const override { return sp_.GetPieceSize(); }
  int32_t eod() const override {
    TRIPOD_CHECK_HINT(sp_.eos_id() >= 0, "train the model with an eos piece (spm_train --eos_id=2)",
                      "--tokenizer-model {} has no </s> piece to end documents with", model_file_);
    return sp_.eos_id();
  }
  void encode(std::string_view text, std::vector<int32_t>* out) const override {
    std::vector<int> ids;
    // SentencePiece needs valid UTF-8 as well: same repair policy as GPT-2.
    const auto status = is_valid_utf8(text) ? sp_.Encode(text, &ids) : sp_.Encode(repair_utf8(text), &ids);
    TRIPOD_CHECK(status.ok(), "SentencePiece encode failed: {}", status.ToString());
    out->insert(out->end(), ids.begin(), ids.end());
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::vector<int> v(ids.begin(), ids.end());
    for (int id : v)
      TRIPOD_CHECK(id >= 0 && id < sp_.GetPieceSize(), "token id {} is outside the vocab of {}", id,
                   sp_.GetPieceSize());
    std::string s;
    const auto status = sp_.Decode(v, &s);
    TRIPOD_CHECK(status.ok(), "SentencePiece decode failed: {}", status.ToString());
    return s;
  }
  std::string describe() const override {
    return fmt::format("SentencePieceTokenizer ({} pieces, eos {}, from {})", vocab_size(),
                       sp_.eos_id(), model_file_);
  }

 private:
  std::string model_file_;
  sentencepiece::SentencePieceProcessor sp_;  // Encode/Decode are const and thread-safe
};

}  // namespace

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& model_file) {
  return std::make_unique<SentencePieceTokenizer>(model_file);
}

}  // namespace tripod::data
