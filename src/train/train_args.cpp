// Implementation of train/train_args.h: the derived values, in one place.
#include "train/train_args.h"

#include <algorithm>

#include "base/error.h"

namespace tripod::train {

void apply_model_flags(const ModelFlagSpelling& f, config::GptConfig& m) {
  using P = config::GptConfig::Position;
  std::string pos = f.position_embedding_type;
  if (f.use_rotary_position_embeddings) {
    TRIPOD_CHECK_HINT(pos.empty() || pos == "rope", "pass one of them",
                      "--use-rotary-position-embeddings contradicts --position-embedding-type {}", pos);
    pos = "rope";
  }
  if (pos == "learned_absolute") m.position_embedding_type = P::LearnedAbsolute;
  else if (pos == "rope") m.position_embedding_type = P::Rope;
  else if (pos == "none") m.position_embedding_type = P::None;
  else if (!pos.empty())
    throw Error(fmt::format("--position-embedding-type {} is not one of learned_absolute, rope, none", pos),
                "Llama-family models use --position-embedding-type rope");
  // Megatron: --no-position-embedding drops the learned table; with the
  // default type that leaves no position information at all.
  if (f.no_position_embedding && m.position_embedding_type == P::LearnedAbsolute) m.position_embedding_type = P::None;
  const std::string& norm = f.normalization;
  if (norm == "LayerNorm") m.normalization = config::GptConfig::Norm::LayerNorm;
  else if (norm == "RMSNorm") m.normalization = config::GptConfig::Norm::RMSNorm;
  else if (!norm.empty())
    throw Error(fmt::format("--normalization {} is not one of LayerNorm, RMSNorm", norm),
                "Llama-family models use --normalization RMSNorm");
  // --num-query-groups without --group-query-attention is ignored, as in Megatron.
  if (f.disable_bias_linear) m.add_bias_linear = false;
}

void TrainArgs::finalize() {
  apply_model_flags(model_flags, model);
  auto& o = optimizer;
  if (o.lr_warmup_fraction >= 0) {
    // Megatron: warmup = fraction x decay steps; here in whole iterations.
    TRIPOD_CHECK_HINT(o.lr.warmup_iters == 0, "pass one of them",
                      "--lr-warmup-fraction and --lr-warmup-iters are both given");
    TRIPOD_CHECK(o.lr_warmup_fraction <= 1, "--lr-warmup-fraction {} is above 1", o.lr_warmup_fraction);
    const int64_t decay = o.lr.decay_iters > 0 ? o.lr.decay_iters : batch.train_iters;
    o.lr.warmup_iters = static_cast<int64_t>(o.lr_warmup_fraction * static_cast<double>(decay));
    o.lr_warmup_fraction = -1;  // applied
  }
}

void TrainArgs::resolve(const parallel::Layout& layout) {
  model.finalize();  // the derived widths, and the model's rules checked before any use
  if (batch.global_batch_size == 0) batch.global_batch_size = batch.micro_batch_size * layout.dp;
  auto& lr = optimizer.lr;
  if (lr.decay_iters <= 0) lr.decay_iters = batch.train_iters;
  lr.style = optim::decay_style_from_name(optimizer.lr_decay_style);
  precision.compute_dtype = precision.bf16 ? DType::BF16 : precision.fp16 ? DType::F16 : DType::F32;
  auto& p = parallel;
  p.recompute = p.recompute_granularity == "full" ? config::Recompute::Full
                : (p.recompute_activations || p.recompute_granularity == "selective") ? config::Recompute::Selective
                                                                                      : config::Recompute::None;
  auto& ls = precision.loss_scaler;
  if (ls.static_scale > 0) ls.min_scale = std::min(ls.min_scale, ls.static_scale);
  // Megatron's sample counts per split: train_iters x global batch, one
  // validation run per --eval-interval (and one at the end), one test run.
  data.vocab_size = model.vocab_size;
  data.padded_vocab_size = model.padded_vocab_size(layout.tp);
  data.seq_length = model.seq_length;
  data.seed = seed;
  const int64_t gb = batch.global_batch_size;
  data.train_samples = batch.train_iters * gb;
  const int64_t evals = logging.eval_interval > 0 ? batch.train_iters / logging.eval_interval + 1 : 0;
  data.valid_samples = evals * logging.eval_iters * gb;
  data.test_samples = logging.eval_iters * gb;
}

}  // namespace tripod::train
