// The model flags of a run against the model a checkpoint holds (--load).
//
// Every difference that changes the parameters (their set or their shapes)
// or what the loaded weights compute (--norm-epsilon, --rotary-base,
// --rotary-percent) is listed at once, each with the flag as the user writes
// it, the checkpoint's value and the flag that matches it, e.g.
//   the model flags contradict the checkpoint ck/iter_0000010 (2 differences):
//     --normalization RMSNorm: the checkpoint's layers use LayerNorm
//     --swiglu: the checkpoint's MLP is GELU (trained without --swiglu)
//   hint: use the checkpoint's model flags: --normalization LayerNorm; drop --swiglu ...
// The kinds (normalization, MLP, positions, biases, ...) come before the
// sizes, so that a size that follows from a kind (the --swiglu default of
// --ffn-hidden-size) is not the first thing named. With --finetune the
// numbers that do not change the parameters may differ (a log line says so).
#pragma once

#include <string>

#include "config/gpt_config.h"

namespace tripod::train {

// Throws Error listing every difference; logs the allowed ones (finetune).
void check_model_args(const config::GptConfig& now, const config::GptConfig& saved, const std::string& where,
                      bool finetune);

}  // namespace tripod::train
