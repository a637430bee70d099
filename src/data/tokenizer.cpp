// make_tokenizer: --tokenizer-type -> a Tokenizer (data/tokenizer.h).
#include "data/tokenizer.h"

#include "base/error.h"
#include "data/gpt2_bpe.h"
#include "data/hf_tokenizer.h"
#ifdef TRIPOD_WITH_SENTENCEPIECE
#include "data/sp_tokenizer.h"
#endif

namespace tripod::data {

std::string default_tokenizer_type(const std::string& tokenizer_model) {
  if (tokenizer_model.empty()) return "GPT2BPETokenizer";
  if (tokenizer_model.size() >= 5 && tokenizer_model.compare(tokenizer_model.size() - 5, 5, ".json") == 0)
    return "HuggingFaceTokenizer";
  return "SentencePieceTokenizer";
}

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerConfig& c) {
  if (c.type == "GPT2BPETokenizer") {
    TRIPOD_CHECK_HINT(!c.vocab_file.empty() && !c.merge_file.empty(),
                      "scripts/get_gpt2_vocab.sh prints both paths",
                      "GPT2BPETokenizer needs --vocab-file and --merge-file");
    return std::make_unique<GPT2BPETokenizer>(c.vocab_file, c.merge_file);
  }
  if (c.type == "SentencePieceTokenizer") {
    TRIPOD_CHECK_HINT(!c.tokenizer_model.empty(), "e.g. --tokenizer-model spm.model",
                      "SentencePieceTokenizer needs --tokenizer-model");
#ifdef TRIPOD_WITH_SENTENCEPIECE
    return make_sentencepiece_tokenizer(c.tokenizer_model);
#else
    TRIPOD_FAIL("this tripod was built without SentencePiece (install libsentencepiece-dev and rebuild)");
#endif
  }
  if (c.type == "HuggingFaceTokenizer") {
    TRIPOD_CHECK_HINT(!c.tokenizer_model.empty(), "e.g. --tokenizer-model path/to/tokenizer.json",
                      "HuggingFaceTokenizer needs --tokenizer-model (a tokenizer.json file)");
    return std::make_unique<HuggingFaceTokenizer>(c.tokenizer_model);
  }
  TRIPOD_FAIL("unknown --tokenizer-type '{}' (GPT2BPETokenizer, SentencePieceTokenizer or "
              "HuggingFaceTokenizer)", c.type);
}

}  // namespace tripod::data
