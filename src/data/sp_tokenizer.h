// SentencePiece tokenizer (--tokenizer-type SentencePieceTokenizer
// --tokenizer-model M.model) through libsentencepiece. The end-of-document id
// is the model's </s> (eos), as Megatron's GPTSentencePieceTokenizer uses it;
// a model trained without eos cannot be used with --append-eod.
#pragma once

#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace tripod::data {

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& model_file);

}  // namespace tripod::data
