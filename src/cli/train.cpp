// `tripod train`: Megatron's pretrain_gpt.py flags -> train::TrainArgs ->
// train::Trainer. Flags only; the loop lives in train/.
#include <CLI/CLI.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/ops.h"
#include "base/error.h"
#include "base/log.h"
#include "cli/command.h"
#include "cli/device.h"
#include "dist/context.h"
#include "dist/rendezvous.h"
#include "parallel/groups.h"
#include "train/trainer.h"

namespace tripod::cli {
namespace {

int64_t vocab_size_from_file(const std::string& path) {
  std::ifstream in(path);
  TRIPOD_CHECK_HINT(in.good(), "check the --vocab-file path (GPT-2's is encoder.json / gpt2-vocab.json)",
                    "cannot open --vocab-file '{}'", path);
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    TRIPOD_FAIL("--vocab-file '{}' is not a JSON vocabulary: {}", path, e.what());
  }
  TRIPOD_CHECK_HINT(j.is_object() && !j.empty(), "pass GPT-2's encoder.json (a token -> id map)",
                    "--vocab-file '{}' is not a JSON object of token ids", path);
  return static_cast<int64_t>(j.size());
}

void add_train_flags(CLI::App& app, train::TrainArgs& a, std::string& vocab_file) {
  // As argparse in Megatron: a repeated flag takes its last value, so a
  // launch script can override a default set earlier on the line.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto& m = a.model;
  app.add_option("--num-layers", m.num_layers, "transformer layers")->capture_default_str();
  app.add_option("--hidden-size", m.hidden_size, "model width")->capture_default_str();
  app.add_option("--num-attention-heads", m.num_attention_heads)->capture_default_str();
  app.add_option("--ffn-hidden-size", m.ffn_hidden_size, "MLP width (default 4 x hidden)");
  app.add_option("--seq-length", m.seq_length)->capture_default_str();
  app.add_option("--max-position-embeddings", m.max_position_embeddings, "default: --seq-length");
  app.add_option("--vocab-size", m.vocab_size, "vocabulary size (mock data; else from the tokenizer)");
  app.add_option("--make-vocab-size-divisible-by", m.make_vocab_size_divisible_by)->capture_default_str();
  app.add_option("--init-method-std", m.init_method_std)->capture_default_str();
  app.add_option("--hidden-dropout", m.hidden_dropout)->capture_default_str();
  app.add_option("--attention-dropout", m.attention_dropout)->capture_default_str();
  app.add_option("--micro-batch-size", a.micro_batch_size)->capture_default_str();
  app.add_option("--global-batch-size", a.global_batch_size, "default: micro batch x data-parallel size");
  app.add_option("--train-iters", a.train_iters)->required();
  app.add_option("--lr", a.lr)->capture_default_str();
  app.add_option("--min-lr", a.min_lr)->capture_default_str();
  app.add_option("--lr-decay-style", a.lr_decay_style, "constant | linear | cosine")->capture_default_str();
  app.add_option("--lr-decay-iters", a.lr_decay_iters, "default: --train-iters");
  app.add_option("--lr-warmup-iters", a.lr_warmup_iters)->capture_default_str();
  app.add_option("--weight-decay", a.weight_decay)->capture_default_str();
  app.add_option("--clip-grad", a.clip_grad, "global grad-norm clip (0: off)")->capture_default_str();
  app.add_option("--adam-beta1", a.adam_beta1)->capture_default_str();
  app.add_option("--adam-beta2", a.adam_beta2)->capture_default_str();
  app.add_option("--adam-eps", a.adam_eps)->capture_default_str();
  app.add_option("--seed", a.seed)->capture_default_str();
  app.add_flag("--mock-data", a.mock_data, "synthetic learnable tokens (needs --vocab-size)");
  app.add_option("--data-path", a.data_path, "PREFIX, or W1 PREFIX1 W2 PREFIX2 ... (Megatron .bin/.idx)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--split", a.split, "train,valid,test document shares")->capture_default_str();
  app.add_option("--vocab-file", vocab_file, "GPT-2 vocab JSON (sets the vocab size)");
  app.add_option("--eval-interval", a.eval_interval)->capture_default_str();
  app.add_option("--eval-iters", a.eval_iters)->capture_default_str();
  app.add_option("--log-interval", a.log_interval)->capture_default_str();
  app.add_option("--metrics-file", a.metrics_file, "append one JSON object per logged iteration");
  app.add_option("--tensor-model-parallel-size", a.tp)->capture_default_str();
  app.add_option("--pipeline-model-parallel-size", a.pp)->capture_default_str();
  app.add_option("--num-layers-per-virtual-pipeline-stage", a.num_layers_per_virtual_stage);
  app.add_flag("--sequence-parallel", a.sequence_parallel);
  app.add_flag("--use-distributed-optimizer", a.use_distributed_optimizer);
  app.add_option("--device", a.device, "cpu | cuda")->capture_default_str();
  app.add_flag("--bf16", a.bf16, "bf16 compute, fp32 master weights (cuda)");
  app.add_flag("--fp16", a.fp16, "fp16 compute with loss scaling (cuda)");
  app.add_option("--peak-tflops", a.peak_tflops, "peak TFLOP/s for MFU (default: 989 on cuda, none on cpu)");
  app.add_option("--distributed-timeout-minutes", a.distributed_timeout_minutes,
                 "timeout of every collective and store wait")->capture_default_str();
  app.add_option("--save", a.save, "checkpoint directory");
  app.add_option("--load", a.load, "checkpoint directory to resume from");
}

int run_train(int argc, char** argv) {
  CLI::App app{"Train a GPT model (Megatron-LM flag names).\n"
               "Example: tripod train --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
               "--seq-length 32 --mock-data --vocab-size 512 --micro-batch-size 4 --train-iters 50 --lr 1e-3"};
  app.get_formatter()->column_width(44);
  train::TrainArgs args;
  std::string vocab_file, dump_weights;
  add_train_flags(app, args, vocab_file);
  app.add_option("--dump-weights", dump_weights,
                 "after training, write each rank's parameter shards to DIR/rank<N>.bin (parity checks)")
      ->group("");  // hidden: a testing aid
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!vocab_file.empty() && args.model.vocab_size == 0) args.model.vocab_size = vocab_size_from_file(vocab_file);
  TRIPOD_CHECK_HINT(args.save.empty() && args.load.empty(), "drop --save/--load for now",
                    "checkpointing (--save/--load) is not available in this build yet");
  // Rank and world size from torchrun / Slurm / Open MPI / tripod launch.
  const dist::RankInfo info = dist::resolve_rank_info();
  auto be = make_backend(args.device, info.local_rank);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(args.distributed_timeout_minutes * 60000));
  auto ctx = dist::DistContext::init(info, be->device().type, timeout);
  const int vpp = 1;
  const auto layout = parallel::Layout::make(ctx->world_size(), args.tp, args.pp, vpp);
  const auto groups = parallel::make_process_groups(*ctx, layout);
  try {
    train::Trainer trainer(args, *be, &groups);
    trainer.run();
    if (!dump_weights.empty()) trainer.dump_weights(dump_weights);
  } catch (...) {
    ctx->abort();  // peers blocked in a collective with this rank end now, not at the timeout
    throw;
  }
  return 0;
}

}  // namespace

TRIPOD_REGISTER_COMMAND(train, "train", "train a GPT model (Megatron flags; CPU or CUDA)", run_train);

}  // namespace tripod::cli
