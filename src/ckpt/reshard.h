// Load-time resharding: a checkpoint saved at any TP x PP x DP fills the
// parameters (and optimizer moments) of a model at any other layout. For
// every parameter this rank holds, the full tensor is assembled from the
// checkpoint's tp slices (CheckpointReader::read_full) and this rank's shard
// is taken from it (take_shard) — no conversion step.
//
// NOTE [Padded vocabulary]
// The word embedding has Vp = vocab rounded up to a multiple of
// make-vocab-size-divisible-by x tp rows, so its global shape depends on the
// tp size it was saved at. Rows [0, min(Vp_saved, Vp_now)) are copied; rows
// beyond the saved ones are padding and take their layout-independent
// initial value (parameters) or zero (optimizer moments).
//
// Relates to: ckpt/sharded_checkpoint.h, model/param_table.h.
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/sharded_checkpoint.h"
#include "model/param_table.h"

namespace tripod::ckpt {

// `saved` (rows_s, ...) fitted to `target_shape` (rows_t, ...): rows copied
// where both have them; other rows from `fill` (target shape) or zero.
Tensor fit_rows(const Tensor& saved, const Shape& target_shape, const Tensor* fill, const std::string& name);

// Sets every parameter of `store` from the checkpoint's "model.<name>".
// init_seed/std/num_layers give the initial values of padding rows.
void load_params(const CheckpointReader& reader, model::ParamStore& store, uint64_t init_seed, float init_std,
                 int64_t num_layers);

// One parameter at a time (a load that never holds the whole model, NOTE
// [Streamed shard load] in distributed/param_and_grad_buffer.cpp): p's
// tp-local value from "model.<name>" (padding rows from the initial
// values), and its tp-local Adam moment (0: exp_avg, 1: exp_avg_sq; padding
// rows zero). The same numbers load_params / load_optimizer_moments set.
Tensor param_value(const CheckpointReader& reader, const model::ParamStore& store, const model::Param& p,
                   uint64_t init_seed, float init_std, int64_t num_layers);
Tensor moment_value(const CheckpointReader& reader, const model::ParamStore& store, const model::Param& p,
                    int moment);

// exp_avg/exp_avg_sq: host f32 (numel) aligned with store.values(); filled
// with this rank's shards of "optim.exp_avg.<name>" / "optim.exp_avg_sq.<name>".
void load_optimizer_moments(const CheckpointReader& reader, const model::ParamStore& store, Tensor& exp_avg,
                            Tensor& exp_avg_sq);

}  // namespace tripod::ckpt
