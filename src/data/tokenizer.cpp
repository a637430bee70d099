// make_tokenizer: --tokenizer-type -> a Tokenizer (data/tokenizer.h).
#include "data/tokenizer.h"

#include "base/error.h"
#include "data/gpt2_bpe.h"
#ifdef TRIPOD_WITH_SENTENCEPIECE
#include "data/sp_tokenizer.h"
#endif

namespace tripod::data {

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
  TRIPOD_FAIL("unknown --tokenizer-type '{}' (GPT2BPETokenizer or SentencePieceTokenizer)", c.type);
}

}  // namespace tripod::data
