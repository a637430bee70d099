// Implementation of cli/train_flags.h.
#include "cli/train_flags.h"

#include "base/log.h"

namespace tripod::cli {

int64_t vocab_size_from_tokenizer(const data::TokenizerConfig& tc) {
  if (tc.type.empty() && tc.vocab_file.empty() && tc.tokenizer_model.empty()) return 0;
  data::TokenizerConfig c = tc;
  if (c.type.empty()) c.type = data::default_tokenizer_type(c.tokenizer_model);
  if (c.type == "NullTokenizer") return 0;
  auto tok = data::make_tokenizer(c);
  log::info("tokenizer: {}", tok->describe());
  return tok->vocab_size();
}

void add_train_flags(CLI::App& app, train::TrainArgs& a, data::TokenizerConfig& tok, DerivedFlags& derived) {
  double& warmup_fraction = derived.lr_warmup_fraction;
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
  app.add_option("--lr-warmup-fraction", warmup_fraction,
                 "warmup as a fraction of the decay iterations (instead of --lr-warmup-iters)");
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
  app.add_option("--tokenizer-type", tok.type,
                 "GPT2BPETokenizer | SentencePieceTokenizer | HuggingFaceTokenizer | NullTokenizer");
  app.add_option("--vocab-file", tok.vocab_file, "GPT-2 vocab JSON (sets the vocab size)");
  app.add_option("--merge-file", tok.merge_file, "GPT-2 merges file");
  app.add_option("--tokenizer-model", tok.tokenizer_model,
                 "SentencePiece .model or Hugging Face tokenizer.json (sets the vocab size)");
  app.add_option("--eval-interval", a.eval_interval)->capture_default_str();
  app.add_option("--eval-iters", a.eval_iters)->capture_default_str();
  app.add_option("--log-interval", a.log_interval)->capture_default_str();
  app.add_option("--metrics-file", a.metrics_file, "append one JSON object per logged iteration");
  app.add_option("--tensorboard-dir", a.tensorboard_dir,
                 "write a TensorBoard event file into DIR (scalars every --log-interval and at each evaluation)");
  app.add_option("--tensor-model-parallel-size", a.tp)->capture_default_str();
  app.add_option("--pipeline-model-parallel-size", a.pp)->capture_default_str();
  app.add_option("--num-layers-per-virtual-pipeline-stage", a.num_layers_per_virtual_stage,
                 "interleaved 1F1B: layers per virtual stage");
  app.add_option("--virtual-pipeline-model-parallel-size", a.virtual_pipeline_size,
                 "interleaved 1F1B: virtual stages per pipeline rank");
  app.add_flag("--sequence-parallel", a.sequence_parallel);
  app.add_flag("--use-distributed-optimizer", a.use_distributed_optimizer);
  app.add_option("--ddp-bucket-size", a.ddp_bucket_size,
                 "elements per data-parallel gradient bucket (default max(4e7, 1e6 x dp); with "
                 "--overlap-grad-reduce only, else one bucket)");
  app.add_flag("--overlap-grad-reduce", a.overlap_grad_reduce,
               "start each bucket's dp reduction in the last micro-batch's backward, as soon as its grads are final");
  app.add_flag("--overlap-param-gather", a.overlap_param_gather,
               "distributed optimizer: all-gather updated params per bucket asynchronously, waited for by the "
               "next forward");
  app.add_option("--device", a.device, "cpu | cuda (default: cuda when a GPU is visible and the build has CUDA)");
  app.add_flag("--bf16", a.bf16, "bf16 compute, fp32 master weights (cuda)");
  app.add_flag("--deterministic-mode", a.deterministic_mode,
               "bitwise-repeatable kernels where the backend has a choice (cuda: cuDNN attention's deterministic dQ)");
  app.add_flag("--fp16", a.fp16, "fp16 compute with loss scaling (cuda)");
  app.add_option("--loss-scale", a.loss_scale, "fp16: static loss scale (default: dynamic)");
  app.add_option("--initial-loss-scale", a.initial_loss_scale, "fp16: first dynamic loss scale")->capture_default_str();
  app.add_option("--min-loss-scale", a.min_loss_scale, "fp16: lowest dynamic loss scale")->capture_default_str();
  app.add_option("--loss-scale-window", a.loss_scale_window, "fp16: clean iterations before the scale doubles")
      ->capture_default_str();
  app.add_option("--hysteresis", a.hysteresis, "fp16: overflows tolerated before the scale halves")
      ->capture_default_str();
  app.add_flag("--recompute-activations", a.recompute_activations,
               "selective recompute: the attention core is recomputed in backward");
  app.add_option("--recompute-granularity", a.recompute_granularity,
                 "full (rerun each layer's forward in backward) | selective");
  app.add_option("--peak-tflops", a.peak_tflops, "peak TFLOP/s for MFU (default: 989 on cuda, none on cpu)");
  app.add_option("--distributed-timeout-minutes", a.distributed_timeout_minutes,
                 "timeout of every collective and store wait")->capture_default_str();
  app.add_option("--save", a.save, "checkpoint directory");
  app.add_option("--load", a.load, "checkpoint directory to resume from (any layout)");
  app.add_option("--save-interval", a.save_interval, "save every N iterations (and at the end)");
  app.add_option("--save-retain", a.save_retain, "keep only the last K checkpoints (0: all)");
  app.add_flag("--finetune", a.finetune, "load weights only; start at iteration 0 with a fresh optimizer");
  app.add_flag("--no-load-optim", a.no_load_optim, "do not load the optimizer state");
  app.add_flag("--no-load-rng", a.no_load_rng, "do not load the RNG state");
  app.add_option("--ckpt-step", a.ckpt_step, "with --load: resume from iteration N instead of the latest");
  app.add_flag("--exit-signal-handler", a.exit_signal_handler,
               "on SIGTERM, save at the next iteration boundary and exit 0");
  app.add_option("--exit-interval", a.exit_interval, "save (with --save) and exit 0 at a multiple of N iterations");
  app.add_option("--exit-duration-in-mins", derived.exit_duration_in_mins,
                 "save (with --save) and exit 0 at the first iteration boundary after M minutes");
}

}  // namespace tripod::cli
