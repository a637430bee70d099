// Implementation of cli/megatron_flags.h. The table follows Megatron-LM's
// megatron/training/arguments.py (late 2025: model, regularization, training,
// initialization, learning-rate, checkpointing, mixed-precision, distributed,
// validation, data, tokenizer and logging groups) plus flags that older
// Megatron releases took and job scripts still pass.
#include "cli/megatron_flags.h"

#include <algorithm>

#include "base/error.h"
#include "base/log.h"

namespace tripod::cli {

const std::vector<CompatFlag>& megatron_compat_flags() {
  static const std::vector<CompatFlag> flags = {
    {"--encoder-num-layers", FlagTakes::Value, FlagAnswer::Rejected, "not a GPT flag (encoder-decoder, BERT, retrieval or multi-token prediction models); drop it"},
    {"--decoder-num-layers", FlagTakes::Value, FlagAnswer::Rejected, "not a GPT flag (encoder-decoder, BERT, retrieval or multi-token prediction models); drop it"},
    {"--attention-backend", FlagTakes::Value, FlagAnswer::Accepted, "fused attention is always on"},
    {"--softmax-type", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--window-size", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--window-attn-skip-freq", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--relative-attention-num-buckets", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--relative-attention-max-distance", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--rotary-interleaved", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--rotary-seq-len-interpolation-factor", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--use-rope-scaling", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--rope-scaling-factor", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--no-rope-freq", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--mrope-section", FlagTakes::List, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--apply-layernorm-1p", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--apply-residual-connection-post-layernorm", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--openai-gelu", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--squared-relu", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--quick-geglu", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--activation-func-clamp-value", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--glu-linear-offset", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--onnx-safe", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--bert-no-binary-head", FlagTakes::None, FlagAnswer::Rejected, "not a GPT flag (encoder-decoder, BERT, retrieval or multi-token prediction models); drop it"},
    {"--multi-latent-attention", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--mtp-num-layers", FlagTakes::Value, FlagAnswer::Rejected, "not a GPT flag (encoder-decoder, BERT, retrieval or multi-token prediction models); drop it"},
    {"--mtp-loss-scaling-factor", FlagTakes::Value, FlagAnswer::Rejected, "not a GPT flag (encoder-decoder, BERT, retrieval or multi-token prediction models); drop it"},
    {"--log-params-norm", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the log line and --metrics-file carry the loss, lr, grad norm and throughput"},
    {"--log-num-zeros-in-grad", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the log line and --metrics-file carry the loss, lr, grad norm and throughput"},
    {"--log-throughput", FlagTakes::None, FlagAnswer::Accepted, "throughput (TFLOP/s/GPU) is always in the iteration log line"},
    {"--log-progress", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the log line and --metrics-file carry the loss, lr, grad norm and throughput"},
    {"--timing-log-level", FlagTakes::Value, FlagAnswer::Accepted, "timers are always logged as the time/* split"},
    {"--log-energy", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the log line and --metrics-file carry the loss, lr, grad norm and throughput"},
    {"--no-barrier-with-level-1-timing", FlagTakes::None, FlagAnswer::Accepted, "timers are always logged as the time/* split"},
    {"--timing-log-option", FlagTakes::Value, FlagAnswer::Accepted, "timers are always logged as the time/* split"},
    {"--tensorboard-log-interval", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: TensorBoard scalars follow --log-interval"},
    {"--tensorboard-queue-size", FlagTakes::Value, FlagAnswer::Accepted, "TensorBoard gets the loss scale, the validation perplexity and memory already"},
    {"--log-timers-to-tensorboard", FlagTakes::None, FlagAnswer::Accepted, "timers are always logged as the time/* split"},
    {"--no-log-loss-scale-to-tensorboard", FlagTakes::None, FlagAnswer::Accepted, "TensorBoard gets the loss scale, the validation perplexity and memory already"},
    {"--log-validation-ppl-to-tensorboard", FlagTakes::None, FlagAnswer::Accepted, "TensorBoard gets the loss scale, the validation perplexity and memory already"},
    {"--log-memory-to-tensorboard", FlagTakes::None, FlagAnswer::Accepted, "TensorBoard gets the loss scale, the validation perplexity and memory already"},
    {"--log-world-size-to-tensorboard", FlagTakes::None, FlagAnswer::Accepted, "TensorBoard gets the loss scale, the validation perplexity and memory already"},
    {"--wandb-project", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: Weights & Biases; use --tensorboard-dir or --metrics-file"},
    {"--wandb-entity", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: Weights & Biases; use --tensorboard-dir or --metrics-file"},
    {"--wandb-exp-name", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: Weights & Biases; use --tensorboard-dir or --metrics-file"},
    {"--wandb-save-dir", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: Weights & Biases; use --tensorboard-dir or --metrics-file"},
    {"--logging-level", FlagTakes::Value, FlagAnswer::Accepted, "logging is always on at info level; TRIPOD_LOG_LEVEL sets it"},
    {"--start-weight-decay", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: weight decay is constant; use --weight-decay"},
    {"--end-weight-decay", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: weight decay is constant; use --weight-decay"},
    {"--weight-decay-incr-style", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: weight decay is constant; use --weight-decay"},
    {"--sgd-momentum", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the optimizer is Adam(W); drop the flag"},
    {"--batch-size", FlagTakes::Value, FlagAnswer::Rejected, "old name: use --micro-batch-size"},
    {"--rampup-batch-size", FlagTakes::List, FlagAnswer::Rejected, "not implemented: batch-size ramp-up; use a fixed --global-batch-size"},
    {"--decrease-batch-size-if-needed", FlagTakes::None, FlagAnswer::Rejected, "not implemented: batch-size ramp-up; use a fixed --global-batch-size"},
    {"--no-check-for-nan-in-loss-and-grad", FlagTakes::None, FlagAnswer::Accepted, "NaN/Inf in loss and gradients always stop the run (fp16 overflow skips the step)"},
    {"--check-for-spiky-loss", FlagTakes::None, FlagAnswer::Rejected, "not implemented: NaN/Inf always stop the run; spike and large-gradient checks are not available"},
    {"--check-for-large-grads", FlagTakes::None, FlagAnswer::Rejected, "not implemented: NaN/Inf always stop the run; spike and large-gradient checks are not available"},
    {"--distribute-saved-activations", FlagTakes::None, FlagAnswer::Rejected, "not implemented: use --recompute-activations or --recompute-granularity full|selective (every layer)"},
    {"--recompute-method", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: use --recompute-activations or --recompute-granularity full|selective (every layer)"},
    {"--recompute-num-layers", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: use --recompute-activations or --recompute-granularity full|selective (every layer)"},
    {"--recompute-modules", FlagTakes::List, FlagAnswer::Rejected, "not implemented: use --recompute-activations or --recompute-granularity full|selective (every layer)"},
    {"--no-clone-scatter-output-in-embedding", FlagTakes::None, FlagAnswer::Accepted, "the embedding output is not cloned; there is no scatter"},
    {"--profile", FlagTakes::None, FlagAnswer::Rejected, "not implemented: profile with nsys or the time/* split (--tensorboard-dir)"},
    {"--profile-step-start", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: profile with nsys or the time/* split (--tensorboard-dir)"},
    {"--profile-step-end", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: profile with nsys or the time/* split (--tensorboard-dir)"},
    {"--iterations-to-skip", FlagTakes::List, FlagAnswer::Rejected, "not implemented: use --train-iters and --eval-interval/--eval-iters"},
    {"--result-rejected-tracker-filename", FlagTakes::Value, FlagAnswer::Accepted, "the rerun state machine is not used; results are deterministic"},
    {"--disable-gloo-process-groups", FlagTakes::None, FlagAnswer::Accepted, "Gloo process groups are always created on cpu only"},
    {"--use-pytorch-profiler", FlagTakes::None, FlagAnswer::Rejected, "not implemented: profile with nsys or the time/* split (--tensorboard-dir)"},
    {"--profile-ranks", FlagTakes::List, FlagAnswer::Rejected, "not implemented: profile with nsys or the time/* split (--tensorboard-dir)"},
    {"--record-memory-history", FlagTakes::None, FlagAnswer::Rejected, "not implemented: profile with nsys or the time/* split (--tensorboard-dir)"},
    {"--memory-snapshot-path", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: profile with nsys or the time/* split (--tensorboard-dir)"},
    {"--tp-comm-overlap", FlagTakes::None, FlagAnswer::Rejected, "not implemented: tensor-parallel communication overlap (Transformer Engine userbuffers)"},
    {"--tp-comm-overlap-cfg", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: tensor-parallel communication overlap (Transformer Engine userbuffers)"},
    {"--disable-tp-comm-overlap-ag", FlagTakes::None, FlagAnswer::Rejected, "not implemented: tensor-parallel communication overlap (Transformer Engine userbuffers)"},
    {"--disable-tp-comm-overlap-rs", FlagTakes::None, FlagAnswer::Rejected, "not implemented: tensor-parallel communication overlap (Transformer Engine userbuffers)"},
    {"--tp-comm-overlap-rs-dgrad", FlagTakes::None, FlagAnswer::Rejected, "not implemented: tensor-parallel communication overlap (Transformer Engine userbuffers)"},
    {"--disable-tp-comm-bulk-dgrad", FlagTakes::None, FlagAnswer::Rejected, "not implemented: tensor-parallel communication overlap (Transformer Engine userbuffers)"},
    {"--disable-tp-comm-bulk-wgrad", FlagTakes::None, FlagAnswer::Rejected, "not implemented: tensor-parallel communication overlap (Transformer Engine userbuffers)"},
    {"--tp-comm-bootstrap-backend", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: tensor-parallel communication overlap (Transformer Engine userbuffers)"},
    {"--use-cpu-initialization", FlagTakes::None, FlagAnswer::Accepted, "the CPU parameter initialization is the reference; results match across devices anyway"},
    {"--empty-unused-memory-level", FlagTakes::Value, FlagAnswer::Accepted, "the caching allocator is not emptied between iterations"},
    {"--check-weight-hash-across-dp-replicas-interval", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: use --train-iters and --eval-interval/--eval-iters"},
    {"--calculate-per-token-loss", FlagTakes::None, FlagAnswer::Accepted, "the loss is always the mean over tokens of the global batch"},
    {"--train-sync-interval", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: use --train-iters and --eval-interval/--eval-iters"},
    {"--checkpoint-activations", FlagTakes::None, FlagAnswer::Rejected, "old name: use --recompute-activations or --recompute-granularity full"},
    {"--train-samples", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: tripod trains in iterations; use --train-iters, --lr-decay-iters, --lr-warmup-iters"},
    {"--no-masked-softmax-fusion", FlagTakes::None, FlagAnswer::Accepted, "kernel fusions are always on in the CUDA backend and absent on the CPU"},
    {"--no-bias-gelu-fusion", FlagTakes::None, FlagAnswer::Accepted, "kernel fusions are always on in the CUDA backend and absent on the CPU"},
    {"--no-bias-swiglu-fusion", FlagTakes::None, FlagAnswer::Accepted, "kernel fusions are always on in the CUDA backend and absent on the CPU"},
    {"--use-fused-weighted-squared-relu", FlagTakes::None, FlagAnswer::Accepted, "kernel fusions are always on in the CUDA backend and absent on the CPU"},
    {"--no-bias-dropout-fusion", FlagTakes::None, FlagAnswer::Accepted, "kernel fusions are always on in the CUDA backend and absent on the CPU"},
    {"--no-rope-fusion", FlagTakes::None, FlagAnswer::Accepted, "kernel fusions are always on in the CUDA backend and absent on the CPU"},
    {"--rope-type", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--cross-entropy-loss-fusion", FlagTakes::None, FlagAnswer::Accepted, "kernel fusions are always on in the CUDA backend and absent on the CPU"},
    {"--cross-entropy-fusion-impl", FlagTakes::Value, FlagAnswer::Accepted, "kernel fusions are always on in the CUDA backend and absent on the CPU"},
    {"--use-flash-attn", FlagTakes::None, FlagAnswer::Accepted, "fused attention is always on"},
    {"--add-qkv-bias", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--optimizer", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the optimizer is Adam(W); drop the flag"},
    {"--optimizer-cpu-offload", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the optimizer is Adam(W); drop the flag"},
    {"--optimizer-offload-fraction", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the optimizer is Adam(W); drop the flag"},
    {"--use-torch-optimizer-for-cpu-offload", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the optimizer is Adam(W); drop the flag"},
    {"--overlap-cpu-optimizer-d2h-h2d", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the optimizer is Adam(W); drop the flag"},
    {"--no-pin-cpu-grads", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the optimizer is Adam(W); drop the flag"},
    {"--no-pin-cpu-params", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the optimizer is Adam(W); drop the flag"},
    {"--dataloader-type", FlagTakes::Value, FlagAnswer::Accepted, "the dataloader is always Megatron's single-pass sampler over the built indices"},
    {"--no-async-tensor-model-parallel-allreduce", FlagTakes::None, FlagAnswer::Accepted, "tensor-parallel all-reduces are always synchronous here"},
    {"--no-persist-layer-norm", FlagTakes::None, FlagAnswer::Accepted, "kernel fusions are always on in the CUDA backend and absent on the CPU"},
    {"--no-gradient-accumulation-fusion", FlagTakes::None, FlagAnswer::Accepted, "kernel fusions are always on in the CUDA backend and absent on the CPU"},
    {"--use-mcore-models", FlagTakes::None, FlagAnswer::Accepted, "tripod always uses its own GPT model (Megatron-core layout)"},
    {"--use-legacy-models", FlagTakes::None, FlagAnswer::Accepted, "tripod always uses its own GPT model (Megatron-core layout)"},
    {"--manual-gc", FlagTakes::None, FlagAnswer::Accepted, "Python garbage collection has no meaning in tripod"},
    {"--manual-gc-interval", FlagTakes::Value, FlagAnswer::Accepted, "Python garbage collection has no meaning in tripod"},
    {"--no-manual-gc-eval", FlagTakes::None, FlagAnswer::Accepted, "Python garbage collection has no meaning in tripod"},
    {"--disable-tp-comm-split-ag", FlagTakes::None, FlagAnswer::Rejected, "not implemented: tensor-parallel communication overlap (Transformer Engine userbuffers)"},
    {"--disable-tp-comm-split-rs", FlagTakes::None, FlagAnswer::Rejected, "not implemented: tensor-parallel communication overlap (Transformer Engine userbuffers)"},
    {"--pipeline-model-parallel-comm-backend", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: NCCL tuning flags; set NCCL_* environment variables instead"},
    {"--high-priority-stream-groups", FlagTakes::List, FlagAnswer::Rejected, "not implemented: NCCL tuning flags; set NCCL_* environment variables instead"},
    {"--use-te-activation-func", FlagTakes::None, FlagAnswer::Accepted, "kernel fusions are always on in the CUDA backend and absent on the CPU"},
    {"--data-parallel-random-init", FlagTakes::None, FlagAnswer::Rejected, "not implemented: every data-parallel replica starts from the same weights"},
    {"--embedding-init-method-std", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--init-method-xavier-uniform", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--lr-decay-samples", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: tripod trains in iterations; use --train-iters, --lr-decay-iters, --lr-warmup-iters"},
    {"--lr-wsd-decay-samples", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: tripod trains in iterations; use --train-iters, --lr-decay-iters, --lr-warmup-iters"},
    {"--lr-wsd-decay-iters", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: use --lr-decay-style constant | linear | cosine"},
    {"--lr-warmup-samples", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: tripod trains in iterations; use --train-iters, --lr-decay-iters, --lr-warmup-iters"},
    {"--lr-warmup-init", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: use --lr-decay-style constant | linear | cosine"},
    {"--warmup", FlagTakes::Value, FlagAnswer::Rejected, "old name: use --lr-warmup-iters or --lr-warmup-fraction"},
    {"--override-opt_param-scheduler", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the scheduler state always comes from the checkpoint; pass --finetune to start a fresh one"},
    {"--override-opt-param-scheduler", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the scheduler state always comes from the checkpoint; pass --finetune to start a fresh one"},
    {"--use-checkpoint-opt_param-scheduler", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the scheduler state always comes from the checkpoint; pass --finetune to start a fresh one"},
    {"--use-checkpoint-opt-param-scheduler", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the scheduler state always comes from the checkpoint; pass --finetune to start a fresh one"},
    {"--decoupled-lr", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the optimizer is Adam(W); drop the flag"},
    {"--decoupled-min-lr", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the optimizer is Adam(W); drop the flag"},
    {"--lr-wsd-decay-style", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: use --lr-decay-style constant | linear | cosine"},
    {"--persistent-save-interval", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: one save interval; use --save-interval and --save-retain"},
    {"--save-retain-interval", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: one save interval; use --save-interval and --save-retain"},
    {"--no-save-optim", FlagTakes::None, FlagAnswer::Rejected, "not implemented: checkpoints always hold the optimizer and RNG state; load without them with --no-load-optim / --no-load-rng"},
    {"--no-save-rng", FlagTakes::None, FlagAnswer::Rejected, "not implemented: checkpoints always hold the optimizer and RNG state; load without them with --no-load-optim / --no-load-rng"},
    {"--load-main-params-from-ckpt", FlagTakes::None, FlagAnswer::Rejected, "not implemented: use --load DIR (with --finetune for weights only)"},
    {"--no-strict-fsdp-dtensor-load", FlagTakes::None, FlagAnswer::Rejected, "not implemented: FSDP; use --use-distributed-optimizer (ZeRO-1 style sharding)"},
    {"--non-persistent-save-interval", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: one save interval; use --save-interval and --save-retain"},
    {"--non-persistent-ckpt-type", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: one save interval; use --save-interval and --save-retain"},
    {"--non-persistent-global-ckpt-dir", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: one save interval; use --save-interval and --save-retain"},
    {"--non-persistent-local-ckpt-dir", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: one save interval; use --save-interval and --save-retain"},
    {"--non-persistent-local-ckpt-algo", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: one save interval; use --save-interval and --save-retain"},
    {"--pretrained-checkpoint", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: use --load DIR (with --finetune for weights only)"},
    {"--no-initialization", FlagTakes::None, FlagAnswer::Rejected, "not implemented: use --load DIR (with --finetune for weights only)"},
    {"--use-checkpoint-args", FlagTakes::None, FlagAnswer::Rejected, "not implemented: pass the model flags explicitly; tripod checks them against the checkpoint and names any difference"},
    {"--use-mp-args-from-checkpoint-args", FlagTakes::None, FlagAnswer::Rejected, "not implemented: pass the model flags explicitly; tripod checks them against the checkpoint and names any difference"},
    {"--no-use-tokenizer-model-from-checkpoint-args", FlagTakes::None, FlagAnswer::Rejected, "not implemented: pass the model flags explicitly; tripod checks them against the checkpoint and names any difference"},
    {"--exit-on-missing-checkpoint", FlagTakes::None, FlagAnswer::Accepted, "--load without a checkpoint already starts from scratch with a warning"},
    {"--use-dist-ckpt", FlagTakes::None, FlagAnswer::Accepted, "tripod has one checkpoint format (safetensors shards + metadata.json) and reads any layout"},
    {"--use-persistent-ckpt-worker", FlagTakes::None, FlagAnswer::Rejected, "not implemented: one save interval; use --save-interval and --save-retain"},
    {"--auto-detect-ckpt-format", FlagTakes::None, FlagAnswer::Accepted, "tripod has one checkpoint format (safetensors shards + metadata.json) and reads any layout"},
    {"--dist-ckpt-format", FlagTakes::Value, FlagAnswer::Accepted, "tripod has one checkpoint format (safetensors shards + metadata.json) and reads any layout"},
    {"--ckpt-format", FlagTakes::Value, FlagAnswer::Accepted, "tripod has one checkpoint format (safetensors shards + metadata.json) and reads any layout"},
    {"--ckpt-convert-format", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: convert with `tripod convert`"},
    {"--ckpt-convert-save", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: convert with `tripod convert`"},
    {"--ckpt-convert-update-legacy-dist-opt-format", FlagTakes::None, FlagAnswer::Rejected, "not implemented: convert with `tripod convert`"},
    {"--ckpt-fully-parallel-save", FlagTakes::None, FlagAnswer::Accepted, "checkpoints are always saved in parallel by every rank"},
    {"--no-ckpt-fully-parallel-save", FlagTakes::None, FlagAnswer::Accepted, "checkpoints are always saved in parallel by every rank"},
    {"--async-save", FlagTakes::None, FlagAnswer::Rejected, "not implemented: one save interval; use --save-interval and --save-retain"},
    {"--ckpt-fully-parallel-load", FlagTakes::None, FlagAnswer::Accepted, "checkpoints are always saved in parallel by every rank"},
    {"--ckpt-assume-constant-structure", FlagTakes::None, FlagAnswer::Accepted, "checkpoints are always saved in parallel by every rank"},
    {"--dist-ckpt-strictness", FlagTakes::Value, FlagAnswer::Accepted, "tripod has one checkpoint format (safetensors shards + metadata.json) and reads any layout"},
    {"--dist-ckpt-save-pre-mcore-014", FlagTakes::None, FlagAnswer::Accepted, "tripod has one checkpoint format (safetensors shards + metadata.json) and reads any layout"},
    {"--dist-ckpt-optim-fully-reshardable", FlagTakes::None, FlagAnswer::Accepted, "tripod has one checkpoint format (safetensors shards + metadata.json) and reads any layout"},
    {"--distrib-optim-fully-reshardable-mem-efficient", FlagTakes::None, FlagAnswer::Accepted, "tripod has one checkpoint format (safetensors shards + metadata.json) and reads any layout"},
    {"--grad-reduce-in-bf16", FlagTakes::None, FlagAnswer::Rejected, "not implemented: gradients are reduced in fp32"},
    {"--fp32-residual-connection", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--apply-query-key-layer-scaling", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag"},
    {"--attention-softmax-in-fp32", FlagTakes::None, FlagAnswer::Accepted, "softmax is always computed in fp32"},
    {"--accumulate-allreduce-grads-in-fp32", FlagTakes::None, FlagAnswer::Accepted, "fp32 gradient accumulation and reduction are always on"},
    {"--fp16-lm-cross-entropy", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the cross-entropy is computed in fp32; drop the flag"},
    {"--disable-bf16-reduced-precision-matmul", FlagTakes::None, FlagAnswer::Rejected, "not implemented: gradients are reduced in fp32"},
    {"--reuse-grad-buf-for-mxfp8-param-ag", FlagTakes::None, FlagAnswer::Rejected, "not implemented: gradients are reduced in fp32"},
    {"--decoder-first-pipeline-num-layers", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: uneven pipeline stages; tripod splits --num-layers evenly"},
    {"--decoder-last-pipeline-num-layers", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: uneven pipeline stages; tripod splits --num-layers evenly"},
    {"--pipeline-model-parallel-layout", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: uneven pipeline stages; tripod splits --num-layers evenly"},
    {"--model-parallel-size", FlagTakes::Value, FlagAnswer::Rejected, "old name: use --tensor-model-parallel-size"},
    {"--num-virtual-stages-per-pipeline-rank", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: use --virtual-pipeline-model-parallel-size or --num-layers-per-virtual-pipeline-stage"},
    {"--microbatch-group-size-per-virtual-pipeline-stage", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: use --virtual-pipeline-model-parallel-size or --num-layers-per-virtual-pipeline-stage"},
    {"--no-overlap-p2p-communication", FlagTakes::None, FlagAnswer::Accepted, "pipeline send/recv overlap is decided by the schedule"},
    {"--overlap-p2p-communication-warmup-flush", FlagTakes::None, FlagAnswer::Rejected, "not implemented: use --virtual-pipeline-model-parallel-size or --num-layers-per-virtual-pipeline-stage"},
    {"--distributed-timeout-seconds-after-init", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: one timeout for everything; use --distributed-timeout-minutes"},
    {"--defer-embedding-wgrad-compute", FlagTakes::None, FlagAnswer::Rejected, "not implemented: deferred embedding wgrad"},
    {"--wgrad-deferral-limit", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: deferred embedding wgrad"},
    {"--no-align-grad-reduce", FlagTakes::None, FlagAnswer::Accepted, "reduce and gather are aligned with the pipeline"},
    {"--ddp-num-buckets", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: use --ddp-bucket-size"},
    {"--ddp-pad-buckets-for-high-nccl-busbw", FlagTakes::None, FlagAnswer::Accepted, "buckets are already padded"},
    {"--ddp-average-in-collective", FlagTakes::None, FlagAnswer::Accepted, "gradient averaging happens in the collective already"},
    {"--overlap-param-gather-with-optimizer-step", FlagTakes::None, FlagAnswer::Rejected, "not implemented: the parameter gather overlaps the next forward; use --overlap-param-gather"},
    {"--no-align-param-gather", FlagTakes::None, FlagAnswer::Accepted, "reduce and gather are aligned with the pipeline"},
    {"--no-scatter-gather-tensors-in-pipeline", FlagTakes::None, FlagAnswer::Accepted, "point-to-point pipeline transfers are whole tensors"},
    {"--use-ring-exchange-p2p", FlagTakes::None, FlagAnswer::Rejected, "not implemented: NCCL tuning flags; set NCCL_* environment variables instead"},
    {"--local-rank", FlagTakes::Value, FlagAnswer::Accepted, "tripod reads the local rank from the launcher's environment"},
    {"--lazy-mpu-init", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the process groups are always initialised at start"},
    {"--account-for-embedding-in-pipeline-split", FlagTakes::None, FlagAnswer::Rejected, "not implemented: uneven pipeline stages; tripod splits --num-layers evenly"},
    {"--account-for-loss-in-pipeline-split", FlagTakes::None, FlagAnswer::Rejected, "not implemented: uneven pipeline stages; tripod splits --num-layers evenly"},
    {"--use-nccl-ub", FlagTakes::None, FlagAnswer::Rejected, "not implemented: NCCL tuning flags; set NCCL_* environment variables instead"},
    {"--disable-symmetric-registration", FlagTakes::None, FlagAnswer::Rejected, "not implemented: NCCL tuning flags; set NCCL_* environment variables instead"},
    {"--use-sharp", FlagTakes::None, FlagAnswer::Rejected, "not implemented: NCCL tuning flags; set NCCL_* environment variables instead"},
    {"--sharp-enabled-group", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: NCCL tuning flags; set NCCL_* environment variables instead"},
    {"--use-megatron-fsdp", FlagTakes::None, FlagAnswer::Rejected, "not implemented: FSDP; use --use-distributed-optimizer (ZeRO-1 style sharding)"},
    {"--init-model-with-meta-device", FlagTakes::None, FlagAnswer::Rejected, "not implemented: FSDP; use --use-distributed-optimizer (ZeRO-1 style sharding)"},
    {"--data-parallel-sharding-strategy", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: FSDP; use --use-distributed-optimizer (ZeRO-1 style sharding)"},
    {"--no-gradient-reduce-div-fusion", FlagTakes::None, FlagAnswer::Accepted, "kernel fusions are always on in the CUDA backend and absent on the CPU"},
    {"--fsdp-double-buffer", FlagTakes::None, FlagAnswer::Rejected, "not implemented: FSDP; use --use-distributed-optimizer (ZeRO-1 style sharding)"},
    {"--suggested-communication-unit-size", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: FSDP; use --use-distributed-optimizer (ZeRO-1 style sharding)"},
    {"--keep-fp8-transpose-cache", FlagTakes::None, FlagAnswer::Rejected, "not implemented: FSDP; use --use-distributed-optimizer (ZeRO-1 style sharding)"},
    {"--enable-full-sharding-in-hsdp", FlagTakes::None, FlagAnswer::Rejected, "not implemented: FSDP; use --use-distributed-optimizer (ZeRO-1 style sharding)"},
    {"--num-distributed-optimizer-instances", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: FSDP; use --use-distributed-optimizer (ZeRO-1 style sharding)"},
    {"--use-torch-fsdp2", FlagTakes::None, FlagAnswer::Rejected, "not implemented: FSDP; use --use-distributed-optimizer (ZeRO-1 style sharding)"},
    {"--torch-fsdp2-no-reshard-after-forward", FlagTakes::None, FlagAnswer::Rejected, "not implemented: FSDP; use --use-distributed-optimizer (ZeRO-1 style sharding)"},
    {"--context-parallel-size", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: context parallelism; use --tensor-model-parallel-size with --sequence-parallel for long sequences"},
    {"--cp-comm-type", FlagTakes::List, FlagAnswer::Rejected, "not implemented: context parallelism; use --tensor-model-parallel-size with --sequence-parallel for long sequences"},
    {"--hierarchical-context-parallel-sizes", FlagTakes::List, FlagAnswer::Rejected, "not implemented: context parallelism; use --tensor-model-parallel-size with --sequence-parallel for long sequences"},
    {"--nccl-communicator-config-path", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: NCCL tuning flags; set NCCL_* environment variables instead"},
    {"--use-tp-pp-dp-mapping", FlagTakes::None, FlagAnswer::Accepted, "no effect on a single model-parallel group setup"},
    {"--replication", FlagTakes::None, FlagAnswer::Rejected, "not implemented: replication of checkpoints across ranks"},
    {"--replication-jump", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: replication of checkpoints across ranks"},
    {"--replication-factor", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: replication of checkpoints across ranks"},
    {"--full-validation", FlagTakes::None, FlagAnswer::Rejected, "not implemented: validation runs --eval-iters batches every --eval-interval"},
    {"--multiple-validation-sets", FlagTakes::None, FlagAnswer::Rejected, "not implemented: use --data-path with weights and --split"},
    {"--test-mode", FlagTakes::None, FlagAnswer::Rejected, "not implemented: validation runs --eval-iters batches every --eval-interval"},
    {"--skip-train", FlagTakes::None, FlagAnswer::Rejected, "not implemented: validation runs --eval-iters batches every --eval-interval"},
    {"--padded-vocab-size", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: the padded vocabulary comes from --make-vocab-size-divisible-by"},
    {"--vocab-extra-ids", FlagTakes::Value, FlagAnswer::Rejected, "not a GPT flag (encoder-decoder, BERT, retrieval or multi-token prediction models); drop it"},
    {"--tokenizer-metadata", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: use GPT2BPETokenizer, SentencePieceTokenizer or HuggingFaceTokenizer (tokenizer.json)"},
    {"--tiktoken-pattern", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: use GPT2BPETokenizer, SentencePieceTokenizer or HuggingFaceTokenizer (tokenizer.json)"},
    {"--tiktoken-num-special-tokens", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: use GPT2BPETokenizer, SentencePieceTokenizer or HuggingFaceTokenizer (tokenizer.json)"},
    {"--tiktoken-special-tokens", FlagTakes::List, FlagAnswer::Rejected, "not implemented: use GPT2BPETokenizer, SentencePieceTokenizer or HuggingFaceTokenizer (tokenizer.json)"},
    {"--legacy-tokenizer", FlagTakes::None, FlagAnswer::Accepted, "tokenizer files are read by tripod itself"},
    {"--trust-remote-code", FlagTakes::None, FlagAnswer::Accepted, "tokenizer files are read by tripod itself"},
    {"--train-data-path", FlagTakes::List, FlagAnswer::Rejected, "not implemented: use --data-path with weights and --split"},
    {"--valid-data-path", FlagTakes::List, FlagAnswer::Rejected, "not implemented: use --data-path with weights and --split"},
    {"--test-data-path", FlagTakes::List, FlagAnswer::Rejected, "not implemented: use --data-path with weights and --split"},
    {"--data-args-path", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: use --data-path with weights and --split"},
    {"--per-split-data-args-path", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: use --data-path with weights and --split"},
    {"--data-cache-path", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: indices are cached next to the data; drop the flag"},
    {"--no-mmap-bin-files", FlagTakes::None, FlagAnswer::Accepted, ".bin files are always memory-mapped"},
    {"--encoder-seq-length", FlagTakes::Value, FlagAnswer::Rejected, "not a GPT flag (encoder-decoder, BERT, retrieval or multi-token prediction models); drop it"},
    {"--decoder-seq-length", FlagTakes::Value, FlagAnswer::Rejected, "not a GPT flag (encoder-decoder, BERT, retrieval or multi-token prediction models); drop it"},
    {"--retriever-seq-length", FlagTakes::Value, FlagAnswer::Rejected, "not a GPT flag (encoder-decoder, BERT, retrieval or multi-token prediction models); drop it"},
    {"--sample-rate", FlagTakes::Value, FlagAnswer::Rejected, "not a GPT flag (encoder-decoder, BERT, retrieval or multi-token prediction models); drop it"},
    {"--mask-prob", FlagTakes::Value, FlagAnswer::Rejected, "not a GPT flag (encoder-decoder, BERT, retrieval or multi-token prediction models); drop it"},
    {"--short-seq-prob", FlagTakes::Value, FlagAnswer::Rejected, "not a GPT flag (encoder-decoder, BERT, retrieval or multi-token prediction models); drop it"},
    {"--num-workers", FlagTakes::Value, FlagAnswer::Accepted, "the data loader reads memory-mapped files on the training thread; there are no loader workers"},
    {"--reset-position-ids", FlagTakes::None, FlagAnswer::Rejected, "not implemented: documents are packed as in GPT pretraining; positions and masks are not reset at EOD"},
    {"--reset-attention-mask", FlagTakes::None, FlagAnswer::Rejected, "not implemented: documents are packed as in GPT pretraining; positions and masks are not reset at EOD"},
    {"--eod-mask-loss", FlagTakes::None, FlagAnswer::Rejected, "not implemented: documents are packed as in GPT pretraining; positions and masks are not reset at EOD"},
    {"--no-create-attention-mask-in-dataloader", FlagTakes::None, FlagAnswer::Accepted, "the attention mask is causal and built on the device"},
    {"--num-dataset-builder-threads", FlagTakes::Value, FlagAnswer::Accepted, "the data loader reads memory-mapped files on the training thread; there are no loader workers"},
    {"--object-storage-cache-path", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: indices are cached next to the data; drop the flag"},
    {"--mid-level-dataset-surplus", FlagTakes::Value, FlagAnswer::Rejected, "not implemented: indices are cached next to the data; drop the flag"},
    {"--data-impl", FlagTakes::Value, FlagAnswer::Accepted, "the indexed dataset is always memory-mapped (Megatron dropped --data-impl)"},
    {"--DDP-impl", FlagTakes::Value, FlagAnswer::Accepted, "data parallelism is always tripod's own (Megatron's \"local\"); Megatron dropped --DDP-impl"},
    {"--use-contiguous-buffers-in-local-ddp", FlagTakes::None, FlagAnswer::Accepted, "gradient buffers are always contiguous"},
    {"--no-contiguous-buffers-in-local-ddp", FlagTakes::None, FlagAnswer::Rejected, "gradient buffers are always contiguous; drop the flag"},
  };
  return flags;
}

std::vector<std::string> closest_flags(const std::string& unknown, const std::vector<std::string>& known,
                                       size_t n) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  std::vector<std::pair<size_t, std::string>> scored;
  for (const auto& k : known) scored.emplace_back(distance(unknown, k), k);
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  // Only names within about a third of the length: no suggestion beats a wild one.
  const size_t limit = std::max<size_t>(3, unknown.size() / 3);
  for (const auto& [d, k] : scored)
    if (out.size() < n && d <= limit) out.push_back(k);
  return out;
}

void MegatronCompat::add_to(CLI::App& app) {
  const auto& flags = megatron_compat_flags();
  values_.resize(flags.size());
  lists_.resize(flags.size());
  for (size_t i = 0; i < flags.size(); ++i) {
    const CompatFlag& f = flags[i];
    CLI::Option* o = nullptr;
    if (f.takes == FlagTakes::None) o = app.add_flag(f.name);
    else if (f.takes == FlagTakes::Value) o = app.add_option(f.name, values_[i]);
    else
      o = app.add_option(f.name, lists_[i])
              ->expected(0, CLI::detail::expected_max_vector_size)
              ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    o->group("");  // listed in docs/megatron-flags.md, not in --help
    options_.emplace_back(&f, o);
  }
  app.allow_extras();
}

void MegatronCompat::apply(const CLI::App& app, bool log_notes) const {
  std::vector<std::string> unknown;
  for (const auto& a : app.remaining())
    if (a.size() > 1 && a[0] == '-') unknown.push_back(a.substr(0, a.find('=')));
  if (!unknown.empty()) {
    std::vector<std::string> known;
    for (const CLI::Option* o : app.get_options())
      for (const auto& l : o->get_lnames()) known.push_back("--" + l);
    std::string hint;
    for (const auto& u : unknown) {
      const auto near = closest_flags(u, known);
      std::string list;
      for (const auto& k : near) list += (list.empty() ? "" : ", ") + k;
      hint += fmt::format("{}{}: {}", hint.empty() ? "" : "; ", u,
                          near.empty() ? "no similar flag" : "did you mean " + list + "?");
    }
    throw Error(fmt::format("unknown flag(s) {} (not a Megatron-LM flag either; docs/megatron-flags.md "
                            "lists those tripod takes)",
                            [&] {
                              std::string s;
                              for (const auto& u : unknown) s += (s.empty() ? "" : " ") + u;
                              return s;
                            }()),
                hint);
  }
  for (const auto& [f, o] : options_) {
    if (o->count() == 0) continue;
    if (f->answer == FlagAnswer::Rejected)
      throw Error(fmt::format("{} is a Megatron-LM flag that tripod does not take: {}", f->name, f->note),
                  "docs/megatron-flags.md lists every Megatron flag and tripod's answer");
    if (log_notes) log::info("{}: accepted and ignored: {}", f->name, f->note);
  }
}

}  // namespace tripod::cli
