// make_tokenizer: --tokenizer-type -> a Tokenizer (data/tokenizer.h).
#include "data/tokenizer.h"

#include <filesystem>

#include "base/error.h"
#include "base/log.h"
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
  if (std::filesystem::exists(std::filesystem::path(tokenizer_model) / "tokenizer.json"))
    return "HuggingFaceTokenizer";
  return "SentencePieceTokenizer";
}

namespace {

// Megatron-LM's names (megatron/training/arguments.py, --tokenizer-type, and
// older releases' Llama3Tokenizer / MistralTokenizer) and tripod's answer.
struct TokenizerName {
  const char* megatron;
  const char* tripod;  // nullptr: not served, `why` says what to use
  const char* why;
};

constexpr TokenizerName kTokenizerNames[] = {
    {"GPT2BPETokenizer", "GPT2BPETokenizer", ""},
    {"SentencePieceTokenizer", "SentencePieceTokenizer", ""},
    {"GPTSentencePieceTokenizer", "SentencePieceTokenizer", ""},
    {"Llama2Tokenizer", "SentencePieceTokenizer", ""},
    {"HuggingFaceTokenizer", "HuggingFaceTokenizer", ""},
    {"NullTokenizer", "NullTokenizer", ""},
    {"Llama3Tokenizer", nullptr,
     "older Megatron-LM's Llama3Tokenizer reads Meta's tiktoken tokenizer.model, which tripod does not: pass "
     "--tokenizer-type HuggingFaceTokenizer --tokenizer-model with the tokenizer.json of the Hugging Face release "
     "of the same model (the same vocabulary; it puts <|begin_of_text|> before every text, as Llama3Tokenizer did)"},
    {"TikTokenizer", nullptr,
     "TikTokenizer reads a tiktoken vocabulary JSON, which tripod does not: pass --tokenizer-type "
     "HuggingFaceTokenizer --tokenizer-model with the model's tokenizer.json"},
    {"MistralTokenizer", nullptr,
     "older Megatron-LM's MistralTokenizer reads mistral-common files, which tripod does not: pass --tokenizer-type "
     "HuggingFaceTokenizer --tokenizer-model with the model's tokenizer.json (SentencePiece releases: "
     "--tokenizer-type SentencePieceTokenizer --tokenizer-model tokenizer.model)"},
    {"BertWordPieceLowerCase", nullptr, "BERT's WordPiece tokenizer is for BERT models; tripod trains GPT models"},
    {"BertWordPieceCase", nullptr, "BERT's WordPiece tokenizer is for BERT models; tripod trains GPT models"},
    {"MultimodalTokenizer", nullptr, "multimodal tokenizers are not for GPT text pretraining"},
    {"NullMultimodalTokenizer", nullptr, "multimodal tokenizers are not for GPT text pretraining"},
    {"SFTTokenizer", nullptr,
     "SFTTokenizer formats conversations for fine-tuning; tripod pretrains on text (preprocess it with "
     "HuggingFaceTokenizer and the model's tokenizer.json)"},
};

}  // namespace

std::string tokenizer_type_for(const std::string& name) {
  for (const auto& t : kTokenizerNames) {
    if (name != t.megatron) continue;
    TRIPOD_CHECK_HINT(t.tripod != nullptr, t.why, "--tokenizer-type {} is not supported", name);
    return t.tripod;
  }
  ::tripod::detail::check_failed(
      nullptr, __FILE__, __LINE__, fmt::format("unknown --tokenizer-type '{}'", name),
      "use GPT2BPETokenizer (--vocab-file, --merge-file), HuggingFaceTokenizer (--tokenizer-model tokenizer.json), "
      "SentencePieceTokenizer, GPTSentencePieceTokenizer or Llama2Tokenizer (--tokenizer-model tokenizer.model), "
      "or NullTokenizer (--vocab-size)");
}

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerConfig& given) {
  TokenizerConfig c = given;
  c.type = tokenizer_type_for(given.type);
  if (c.type != given.type)
    log::info("--tokenizer-type {}: tripod's {} (Megatron-Core reads the SentencePiece names with one wrapper: "
              "no <s> added, end of document </s>)",
              given.type, c.type);
  if (c.type == "GPT2BPETokenizer") {
    TRIPOD_CHECK_HINT(!c.vocab_file.empty() && !c.merge_file.empty(),
                      "scripts/get_gpt2_vocab.sh prints both paths",
                      "GPT2BPETokenizer needs --vocab-file and --merge-file");
    return std::make_unique<GPT2BPETokenizer>(c.vocab_file, c.merge_file);
  }
  if (c.type == "SentencePieceTokenizer") {
    TRIPOD_CHECK_HINT(!c.tokenizer_model.empty(), "e.g. --tokenizer-model spm.model",
                      "{} needs --tokenizer-model", given.type);
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
  ::tripod::detail::check_failed(
      nullptr, __FILE__, __LINE__, "NullTokenizer has no text encoding",
      "NullTokenizer only trains on data that is already ids (--mock-data or --data-path, with --vocab-size); "
      "preprocess and generate need a tokenizer with its files");
}

}  // namespace tripod::data
