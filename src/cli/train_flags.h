// The flags of `tripod train` (Megatron's pretrain_gpt.py names) -> train::TrainArgs,
// shared by the commands that take a training command line (train, doctor).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>

#include "data/tokenizer.h"
#include "train/train_args.h"

namespace tripod::cli {

// Megatron flags that fill other TrainArgs fields after parsing.
struct DerivedFlags {
  double lr_warmup_fraction = -1;
  double exit_duration_in_mins = 0;
};

// The vocabulary size from the tokenizer flags (Megatron builds the
// tokenizer to learn it): loading the tokenizer also validates the files, so
// a wrong vocab or merges file fails here, before any compute.
int64_t vocab_size_from_tokenizer(const data::TokenizerConfig& tc);

// Registers the model, layout, batch, optimizer, schedule, data, checkpoint
// and logging flags (the Llama-family model flags are cli/model_flags.h, the
// accepted-and-ignored Megatron flags cli/megatron_flags.h).
void add_train_flags(CLI::App& app, train::TrainArgs& a, data::TokenizerConfig& tok, DerivedFlags& derived);

}  // namespace tripod::cli
