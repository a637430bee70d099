// Implementation of train/args_agreement.h. See NOTE [Args agreement].
#include "train/args_agreement.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sstream>
#include <thread>

#include "base/error.h"

namespace tripod::train {
namespace {

constexpr char kPrefix[] = "tripod/args_agreement/";
constexpr char kAgree[] = "ok";

std::string serialize(const FlagValues& v) {
  std::string s;
  for (const auto& [flag, value] : v) s += flag + '\t' + value + '\n';
  return s;
}

FlagValues parse(const std::string& s) {
  FlagValues v;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) {
    const auto tab = line.find('\t');
    if (tab != std::string::npos) v.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return v;
}

std::string flag(bool b) { return b ? "on" : "off"; }

}  // namespace

FlagValues agreed_args(const TrainArgs& a) {
  const auto& m = a.model;
  auto num = [](auto x) { return fmt::format("{}", x); };
  return {
      // model shape
      {"--num-layers", num(m.num_layers)},
      {"--hidden-size", num(m.hidden_size)},
      {"--num-attention-heads", num(m.num_attention_heads)},
      {"--ffn-hidden-size", num(m.ffn_hidden_size)},
      {"--seq-length", num(m.seq_length)},
      {"--max-position-embeddings", num(m.max_position_embeddings)},
      {"--vocab-size", num(m.vocab_size)},
      {"--make-vocab-size-divisible-by", num(m.make_vocab_size_divisible_by)},
      {"--init-method-std", num(m.init_method_std)},
      {"--hidden-dropout", num(m.hidden_dropout)},
      {"--attention-dropout", num(m.attention_dropout)},
      // Llama-family options (config/gpt_config.h)
      {"--position-embedding-type", num(static_cast<int>(m.position_embedding_type))},
      {"--rotary-base", num(m.rotary_base)},
      {"--rotary-percent", num(m.rotary_percent)},
      {"--normalization", m.rmsnorm() ? "RMSNorm" : "LayerNorm"},
      {"--norm-epsilon", num(m.layernorm_epsilon)},
      {"--swiglu", flag(m.swiglu)},
      {"--group-query-attention", flag(m.group_query_attention)},
      {"--num-query-groups", num(m.num_query_groups)},
      {"--untie-embeddings-and-output-weights", flag(m.untie_embeddings_and_output_weights)},
      {"--disable-bias-linear", flag(!m.add_bias_linear)},
      // layout
      {"--tensor-model-parallel-size", num(a.tp)},
      {"--pipeline-model-parallel-size", num(a.pp)},
      {"--num-layers-per-virtual-pipeline-stage", num(a.num_layers_per_virtual_stage)},
      {"--virtual-pipeline-model-parallel-size", num(a.virtual_pipeline_size)},
      {"--sequence-parallel", flag(a.sequence_parallel)},
      {"--use-distributed-optimizer", flag(a.use_distributed_optimizer)},
      {"--ddp-bucket-size", num(a.ddp_bucket_size)},
      {"--overlap-grad-reduce", flag(a.overlap_grad_reduce)},
      {"--overlap-param-gather", flag(a.overlap_param_gather)},
      {"--recompute-activations", flag(a.recompute_activations)},
      {"--recompute-granularity", a.recompute_granularity},
      // batch sizes and length of the run
      {"--micro-batch-size", num(a.micro_batch_size)},
      {"--global-batch-size", num(a.global_batch_size)},
      {"--train-iters", num(a.train_iters)},
      // optimizer and schedule
      {"--lr", num(a.lr)},
      {"--min-lr", num(a.min_lr)},
      {"--lr-decay-style", a.lr_decay_style},
      {"--lr-decay-iters", num(a.lr_decay_iters)},
      {"--lr-warmup-iters", num(a.lr_warmup_iters)},
      {"--weight-decay", num(a.weight_decay)},
      {"--clip-grad", num(a.clip_grad)},
      {"--adam-beta1", num(a.adam_beta1)},
      {"--adam-beta2", num(a.adam_beta2)},
      {"--adam-eps", num(a.adam_eps)},
      // data
      {"--seed", num(a.seed)},
      {"--mock-data", flag(a.mock_data)},
      {"--data-path", fmt::format("{}", fmt::join(a.data_path, " "))},
      {"--split", a.split},
      {"--tokenizer-type", a.tokenizer_type},
      // precision and loss scaling
      {"--device", a.device},
      {"--bf16", flag(a.bf16)},
      {"--fp16", flag(a.fp16)},
      {"--loss-scale", num(a.loss_scale)},
      {"--initial-loss-scale", num(a.initial_loss_scale)},
      {"--min-loss-scale", num(a.min_loss_scale)},
      {"--loss-scale-window", num(a.loss_scale_window)},
      {"--hysteresis", num(a.hysteresis)},
      // intervals that start collectives (logging, evaluation, saving, stopping)
      {"--log-interval", num(a.log_interval)},
      {"--eval-interval", num(a.eval_interval)},
      {"--eval-iters", num(a.eval_iters)},
      {"--save-interval", num(a.save_interval)},
      {"--exit-interval", num(a.exit_interval)},
      {"--exit-signal-handler", flag(a.exit_signal_handler)},
      {"--finetune", flag(a.finetune)},
      {"--no-load-optim", flag(a.no_load_optim)},
      {"--no-load-rng", flag(a.no_load_rng)},
      {"--ckpt-step", num(a.ckpt_step)},
  };
}

std::string first_difference(const FlagValues& mine, int my_rank, const FlagValues& rank0) {
  for (size_t i = 0; i < mine.size() || i < rank0.size(); ++i) {
    if (i >= mine.size() || i >= rank0.size() || mine[i].first != rank0[i].first)
      return fmt::format("rank {} and rank 0 run different tripod versions (their lists of flags differ)", my_rank);
    if (mine[i].second != rank0[i].second) {
      auto shown = [](const std::string& v) { return v.empty() ? std::string("(empty)") : v; };
      return fmt::format("rank {} has {} {}, rank 0 has {}", my_rank, mine[i].first, shown(mine[i].second),
                         shown(rank0[i].second));
    }
  }
  return "";
}

void check_args_agree(comm::Store& store, int rank, int world_size, const TrainArgs& args,
                      std::chrono::milliseconds timeout) {
  if (world_size <= 1) return;
  const std::string prefix = kPrefix;
  const FlagValues mine = agreed_args(args);
  std::string result;
  if (rank == 0) {
    store.set_str(prefix + "0", serialize(mine));
    std::string first;
    for (int r = 1; r < world_size; ++r) {
      const std::string v = store.get_str(prefix + "verdict/" + std::to_string(r), timeout);
      if (v != kAgree && first.empty()) first = v;
    }
    result = first.empty() ? kAgree : first;
    store.set_str(prefix + "result", result);
    if (result != kAgree) {
      // Rank 0 hosts the store: it stays until every rank has read the verdict,
      // so that each stops with the message, not with a lost connection.
      const auto until = std::chrono::steady_clock::now() + timeout;
      while (store.add(prefix + "read", 0) < world_size - 1 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  } else {
    const FlagValues rank0 = parse(store.get_str(prefix + "0", timeout));
    const std::string diff = first_difference(mine, rank, rank0);
    store.set_str(prefix + "verdict/" + std::to_string(rank), diff.empty() ? kAgree : diff);
    result = store.get_str(prefix + "result", timeout);
    if (result != kAgree) store.add(prefix + "read", 1);
  }
  TRIPOD_CHECK_HINT(result == kAgree,
                    "start every rank with the same flags (only --metrics-file, --tensorboard-dir, --save, --load "
                    "and the tokenizer's file paths may differ)",
                    "the ranks were started with different flags: {}", result);
}

}  // namespace tripod::train
