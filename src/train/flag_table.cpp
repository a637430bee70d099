// Implementation of train/flag_table.h: tripod's flags, in the order
// `tripod train --help` lists them. The Megatron-LM flags tripod does not
// implement are megatron_rows.cpp; the docs page is flag_docs.cpp.
#include "train/flag_table.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unordered_map>

#include "base/error.h"
#include "train/megatron_rows.h"

namespace tripod::train {
namespace {

#define MEMBER(path) [](TrainArgs& a) -> FlagRef { return &a.path; }

using S = FlagStatus;

// A Megatron-LM flag tripod implements, or (status TripodOnly) one of its own.
FlagRow flag(const char* name, FlagRef (*member)(TrainArgs&), const char* help, S status = S::Implemented) {
  FlagRow r;
  r.name = name;
  r.member = member;
  r.text = help;
  r.status = status;
  return r;
}

std::string on_off(bool b) { return b ? "on" : "off"; }

void append_tripod_rows(std::vector<FlagRow>& t) {
  // ---- model (config::GptConfig) ----
  t.push_back(flag("--num-layers", MEMBER(model.num_layers), "transformer layers").agreed().plan().defaulted());
  t.push_back(flag("--hidden-size", MEMBER(model.hidden_size), "model width").agreed().plan().defaulted());
  t.push_back(flag("--num-attention-heads", MEMBER(model.num_attention_heads), "attention heads")
                  .agreed().plan().defaulted());
  t.push_back(flag("--ffn-hidden-size", MEMBER(model.ffn_hidden_size), "MLP width (default 4 x hidden)")
                  .agreed().plan());
  t.push_back(flag("--seq-length", MEMBER(model.seq_length), "sequence length").agreed().plan().defaulted());
  t.push_back(flag("--max-position-embeddings", MEMBER(model.max_position_embeddings), "default: --seq-length")
                  .agreed().plan());
  t.push_back(flag("--vocab-size", MEMBER(model.vocab_size),
                   "vocabulary size (mock data; else from the tokenizer)").agreed().plan());
  t.push_back(flag("--make-vocab-size-divisible-by", MEMBER(model.make_vocab_size_divisible_by),
                   "the vocabulary is padded to a multiple of this x TP").agreed().plan().defaulted());
  t.push_back(flag("--init-method-std", MEMBER(model.init_method_std), "std of the normal weight init")
                  .agreed().defaulted());
  t.push_back(flag("--hidden-dropout", MEMBER(model.hidden_dropout), "dropout after attention and MLP")
                  .agreed().defaulted());
  t.push_back(flag("--attention-dropout", MEMBER(model.attention_dropout), "dropout of the attention probabilities")
                  .agreed().defaulted());
  // The Llama family (docs/llama.md); the spellings become GptConfig fields in finalize().
  t.push_back(flag("--position-embedding-type", MEMBER(model_flags.position_embedding_type),
                   "learned_absolute (GPT-2) | rope | none")
                  .agreed([](const TrainArgs& a) { return fmt::format("{}", int(a.model.position_embedding_type)); })
                  .plan().shows("learned_absolute"));
  t.push_back(flag("--use-rotary-position-embeddings", MEMBER(model_flags.use_rotary_position_embeddings),
                   "= --position-embedding-type rope").plan());
  t.push_back(flag("--no-position-embedding", MEMBER(model_flags.no_position_embedding),
                   "no learned position embedding (with rope, or none)").plan());
  t.push_back(flag("--rotary-base", MEMBER(model.rotary_base), "RoPE base theta (Llama 2: 10000, Llama 3: 500000)")
                  .agreed().plan().defaulted());
  t.push_back(flag("--rotary-percent", MEMBER(model.rotary_percent), "share of each head's dims that RoPE rotates")
                  .agreed().plan().defaulted());
  t.push_back(flag("--normalization", MEMBER(model_flags.normalization), "LayerNorm (GPT-2) | RMSNorm")
                  .agreed([](const TrainArgs& a) { return std::string(a.model.rmsnorm() ? "RMSNorm" : "LayerNorm"); })
                  .plan().shows("LayerNorm"));
  t.push_back(flag("--norm-epsilon", MEMBER(model.layernorm_epsilon), "epsilon of LayerNorm / RMSNorm")
                  .agreed().plan().defaulted());
  t.push_back(flag("--swiglu", MEMBER(model.swiglu), "SwiGLU MLP: fc1 = [gate | up] (2 x --ffn-hidden-size rows)")
                  .agreed().plan());
  t.push_back(flag("--group-query-attention", MEMBER(model.group_query_attention),
                   "grouped-query attention (--num-query-groups)").agreed().plan());
  t.push_back(flag("--num-query-groups", MEMBER(model.num_query_groups), "K/V heads with --group-query-attention")
                  .agreed().plan());
  t.push_back(flag("--qk-layernorm", MEMBER(model.qk_layernorm),
                   "a norm (--normalization's kind) over each query and key head after qkv, before RoPE (Megatron-core, Qwen3)")
                  .agreed().plan());
  t.push_back(flag("--untie-embeddings-and-output-weights", MEMBER(model.untie_embeddings_and_output_weights),
                   "an output layer of its own instead of the word embedding").agreed().plan());
  t.push_back(flag("--disable-bias-linear", MEMBER(model_flags.disable_bias_linear),
                   "no biases in the linear layers (Llama)")
                  .agreed([](const TrainArgs& a) { return on_off(!a.model.add_bias_linear); }).plan());
  t.push_back(flag("--kv-channels", MEMBER(model.kv_channels), "head size; only --hidden-size / --num-attention-heads")
                  .plan());
  // Mixture of experts (config/moe_config.h, docs/moe.md).
  t.push_back(flag("--num-experts", MEMBER(model.moe.num_experts), "experts per MoE layer (0: a dense model)")
                  .agreed().plan());
  t.push_back(flag("--moe-ffn-hidden-size", MEMBER(model.moe.ffn_hidden_size),
                   "each expert's MLP width (default --ffn-hidden-size)").agreed().plan());
  t.push_back(flag("--moe-router-topk", MEMBER(model.moe.router_topk), "experts each token is routed to")
                  .agreed().plan().defaulted());
  t.push_back(flag("--moe-router-score-function", MEMBER(model.moe.router_score_function),
                   "softmax | sigmoid (DeepSeek-V3: sigmoid scores, renormalised over the top k)")
                  .agreed().defaulted());
  t.push_back(flag("--moe-router-pre-softmax", MEMBER(model.moe.router_pre_softmax),
                   "softmax over all experts before the top-k (Qwen2-MoE); default: top-k logits, then softmax "
                   "(Mixtral)").agreed());
  t.push_back(flag("--moe-router-topk-scaling-factor", MEMBER(model.moe.router_topk_scaling_factor),
                   "the routing probabilities are multiplied by this (0: not scaled)").agreed());
  t.push_back(flag("--moe-router-dtype", MEMBER(model.moe.router_dtype),
                   "fp32: the router GEMM in fp32 (the score function, top-k and losses always are)").agreed());
  t.push_back(flag("--moe-shared-expert-intermediate-size", MEMBER(model.moe.shared_expert_intermediate_size),
                   "width of a shared expert every token goes through (0: none)").agreed().plan());
  t.push_back(flag("--moe-shared-expert-gate", MEMBER(model.moe.shared_expert_gate),
                   "scale the shared expert's output by sigmoid(x g) (Qwen2-MoE)").agreed().plan());
  t.push_back(flag("--moe-router-load-balancing-type", MEMBER(model.moe.router_load_balancing_type),
                   "aux_loss (per micro-batch) | seq_aux_loss (per sequence) | none").agreed().defaulted());
  t.push_back(flag("--moe-aux-loss-coeff", MEMBER(model.moe.aux_loss_coeff),
                   "weight of the load-balancing loss (one value)").agreed().defaulted());
  t.push_back(flag("--moe-z-loss-coeff", MEMBER(model.moe.z_loss_coeff),
                   "weight of the router z-loss (ST-MoE; 0: none)").agreed());
  t.push_back(flag("--moe-router-enable-expert-bias", MEMBER(model.moe.router_enable_expert_bias),
                   "DeepSeek-V3's aux-loss-free balancing: a per-expert bias on the scores for the top-k choice")
                  .agreed().plan());
  t.push_back(flag("--moe-router-bias-update-rate", MEMBER(model.moe.router_bias_update_rate),
                   "expert bias += rate x sign(mean load - expert load) after each step").agreed().defaulted());
  t.push_back(flag("--moe-expert-capacity-factor", MEMBER(model.moe.expert_capacity_factor),
                   "tokens per expert capped at ceil(N k / E x factor), the rest dropped (default: dropless)")
                  .agreed().plan());
  t.push_back(flag("--moe-token-drop-policy", MEMBER(model.moe.token_drop_policy),
                   "over capacity, keep the highest probabilities (probs) or the earliest tokens (position)")
                  .agreed().defaulted());
  t.push_back(flag("--moe-layer-freq", MEMBER(model.moe.layer_freq),
                   "MoE layers: every N-th layer, or a pattern such as [1,0,1,0] or ([1]*3+[0])*2").agreed().plan()
                  .defaulted());
  t.push_back(flag("--moe-token-dispatcher-type", MEMBER(model.moe.token_dispatcher_type),
                   "alltoall | allgather (the same numbers; how tokens reach the expert-parallel ranks)")
                  .agreed().defaulted());
  t.push_back(flag("--moe-grouped-gemm", MEMBER(model.moe.grouped_gemm),
                   "the local experts' forward and data-gradient GEMMs as one grouped GEMM each (Megatron's GroupedMLP; "
                   "cuBLAS on the GPU, the same loop on the CPU); experts with biases keep the per-expert loop. "
                   "At the Mixtral shape on an H100 the default per-expert loop is faster (docs/moe.md)"));
  // ---- batch ----
  t.push_back(flag("--micro-batch-size", MEMBER(batch.micro_batch_size), "samples per micro-batch")
                  .agreed().defaulted());
  t.push_back(flag("--global-batch-size", MEMBER(batch.global_batch_size),
                   "default: micro batch x data-parallel size").agreed());
  t.push_back(flag("--train-iters", MEMBER(batch.train_iters), "iterations to train (or --train-samples)").agreed());
  t.push_back(flag("--train-samples", MEMBER(batch.train_samples),
                   "samples to train instead of --train-iters (iterations: samples // global batch; the lr schedule "
                   "then counts samples: --lr-warmup-samples, --lr-decay-samples)")
                  .agreed());
  // ---- optimizer and learning-rate schedule ----
  t.push_back(flag("--lr", MEMBER(optimizer.lr.max_lr), "peak learning rate").agreed().defaulted());
  t.push_back(flag("--min-lr", MEMBER(optimizer.lr.min_lr), "learning rate after the decay").agreed().defaulted());
  t.push_back(flag("--lr-decay-style", MEMBER(optimizer.lr_decay_style), "constant | linear | cosine")
                  .agreed().defaulted());
  t.push_back(flag("--lr-decay-iters", MEMBER(optimizer.lr.decay_iters), "default: --train-iters").agreed());
  t.push_back(flag("--lr-warmup-iters", MEMBER(optimizer.lr.warmup_iters), "linear warmup from 0")
                  .agreed().defaulted());
  t.push_back(flag("--lr-warmup-samples", MEMBER(optimizer.lr_warmup_samples),
                   "with --train-samples: linear warmup over this many samples").agreed());
  t.push_back(flag("--lr-decay-samples", MEMBER(optimizer.lr_decay_samples),
                   "with --train-samples: decay over this many samples (default: --train-samples)").agreed());
  t.push_back(flag("--lr-warmup-fraction", MEMBER(optimizer.lr_warmup_fraction),
                   "warmup as a fraction of the decay iterations (instead of --lr-warmup-iters)"));
  t.push_back(flag("--decoupled-lr", MEMBER(optimizer.decoupled_lr),
                   "the word embeddings' and output layer's peak lr (same warmup and decay)")
                  .agreed());
  t.push_back(flag("--decoupled-min-lr", MEMBER(optimizer.decoupled_min_lr),
                   "with --decoupled-lr: their lr after the decay (default: --min-lr)")
                  .agreed());
  t.push_back(flag("--weight-decay", MEMBER(optimizer.adam.weight_decay), "AdamW weight decay").agreed().defaulted());
  t.push_back(flag("--clip-grad", MEMBER(optimizer.clip_grad), "global grad-norm clip (0: off)").agreed().defaulted());
  t.push_back(flag("--adam-beta1", MEMBER(optimizer.adam.beta1), "AdamW beta1").agreed().defaulted());
  t.push_back(flag("--adam-beta2", MEMBER(optimizer.adam.beta2), "AdamW beta2").agreed().defaulted());
  t.push_back(flag("--adam-eps", MEMBER(optimizer.adam.eps), "AdamW epsilon").agreed().defaulted());
  t.push_back(flag("--seed", MEMBER(seed), "initialization, dropout and data order").agreed().defaulted());
  // ---- data and tokenizer ----
  t.push_back(flag("--mock-data", MEMBER(data.mock_data), "synthetic learnable tokens (needs --vocab-size)").agreed());
  t.push_back(flag("--data-path", MEMBER(data.data_path), "PREFIX, or W1 PREFIX1 W2 PREFIX2 ... (Megatron .bin/.idx)")
                  .agreed());
  t.push_back(flag("--split", MEMBER(data.split), "train,valid,test document shares").agreed().defaulted());
  t.push_back(flag("--data-cache-path", MEMBER(data.data_cache_path),
                   "folder for the dataset index caches (default: beside the data, or a per-user folder when "
                   "that is read-only)"));
  t.push_back(flag("--tokenizer-type", MEMBER(tokenizer.type),
                   "GPT2BPETokenizer | SentencePieceTokenizer | HuggingFaceTokenizer | NullTokenizer, or Megatron's "
                   "GPTSentencePieceTokenizer and Llama2Tokenizer (= SentencePieceTokenizer)").agreed());
  // File paths may differ between ranks (node-local copies): not agreed.
  t.push_back(flag("--vocab-file", MEMBER(tokenizer.vocab_file), "GPT-2 vocab JSON (sets the vocab size)"));
  t.push_back(flag("--merge-file", MEMBER(tokenizer.merge_file), "GPT-2 merges file"));
  t.push_back(flag("--tokenizer-model", MEMBER(tokenizer.tokenizer_model),
                   "SentencePiece .model or Hugging Face tokenizer.json (sets the vocab size)"));
  // ---- logging and evaluation ----
  t.push_back(flag("--eval-interval", MEMBER(logging.eval_interval), "validate every N iterations")
                  .agreed().defaulted());
  t.push_back(flag("--eval-iters", MEMBER(logging.eval_iters), "global batches per validation").agreed().defaulted());
  t.push_back(flag("--log-interval", MEMBER(logging.log_interval), "log every N iterations").agreed().defaulted());
  t.push_back(flag("--metrics-file", MEMBER(logging.metrics_file), "append one JSON object per logged iteration",
                   S::TripodOnly));
  t.push_back(flag("--tensorboard-dir", MEMBER(logging.tensorboard_dir),
                   "write a TensorBoard event file into DIR (scalars every --log-interval and at each evaluation)"));
  // ---- layout and data parallelism ----
  t.push_back(flag("--expert-model-parallel-size", MEMBER(parallel.ep),
                   "MoE: the experts split over this many ranks of a pipeline stage, folded onto its tp, cp and dp ranks (docs/moe.md)").agreed().plan()
                  .defaulted());
  t.push_back(flag("--expert-tensor-parallel-size", MEMBER(parallel.etp),
                   "MoE: tensor parallelism inside each expert: the --tensor-model-parallel-size (default, as Megatron: fc1 split by columns, fc2 by rows over the tp group, which gathers its tokens) or 1 (whole experts on each tp rank's tokens; needed to fold --expert-model-parallel-size onto tp ranks); docs/moe.md").agreed().plan());
  t.push_back(flag("--tensor-model-parallel-size", MEMBER(parallel.tp), "tensor-parallel group size")
                  .agreed().defaulted());
  t.push_back(flag("--pipeline-model-parallel-size", MEMBER(parallel.pp), "pipeline stages").agreed().defaulted());
  t.push_back(flag("--num-layers-per-virtual-pipeline-stage", MEMBER(parallel.num_layers_per_virtual_stage),
                   "interleaved 1F1B: layers per virtual stage").agreed());
  t.push_back(flag("--virtual-pipeline-model-parallel-size", MEMBER(parallel.virtual_pipeline_size),
                   "interleaved 1F1B: virtual stages per pipeline rank (an older Megatron-LM flag)", S::TripodOnly)
                  .agreed());
  t.push_back(flag("--sequence-parallel", MEMBER(parallel.sequence_parallel),
                   "split LayerNorm and dropout activations over the tensor-parallel group").agreed());
  t.push_back(flag("--context-parallel-size", MEMBER(parallel.cp),
                   "context-parallel group size: each rank holds 1/CP of every sequence (2*CP load-balanced "
                   "chunks), attention passes K/V around the group's ring; --seq-length a multiple of 2*CP")
                  .agreed().defaulted());
  t.push_back(flag("--cp-comm-type", MEMBER(parallel.cp_comm_type),
                   "context parallelism's attention exchange, one for all layers or one per layer: p2p (the K/V ring, "
                   "overlapped), all_gather (K/V all-gathered), a2a (all-to-all heads for sequence; heads and K/V "
                   "groups per tp rank divisible by CP); a2a+p2p not yet")
                  .agreed().shows("p2p"));
  t.push_back(flag("--use-distributed-optimizer", MEMBER(parallel.ddp.use_distributed_optimizer),
                   "shard the optimizer state over the data-parallel group (ZeRO-1; = "
                   "--data-parallel-sharding-strategy optim)").agreed());
  t.push_back(flag("--data-parallel-sharding-strategy", MEMBER(parallel.data_parallel_sharding_strategy),
                   "no_shard | optim (ZeRO-1) | optim_grads (ZeRO-2: gradients reduce-scattered per micro-batch "
                   "into the shard) | optim_grads_params (ZeRO-3: parameters sharded at rest, gathered per layer); "
                   "default: optim with --use-distributed-optimizer, optim_grads_params with --use-megatron-fsdp, "
                   "else no_shard (docs/zero.md)").agreed().plan());
  t.push_back(flag("--use-megatron-fsdp", MEMBER(parallel.use_megatron_fsdp),
                   "fully sharded data parallelism: --data-parallel-sharding-strategy defaults to "
                   "optim_grads_params, the distributed optimizer is on").agreed().plan());
  t.push_back(flag("--num-distributed-optimizer-instances", MEMBER(parallel.ddp.num_distributed_optimizer_instances),
                   "hybrid sharding (HSDP): the data-parallel ranks form N instances of consecutive ranks; each "
                   "shards the optimizer state (gradients, parameters: --data-parallel-sharding-strategy) over its "
                   "ranks, the instances replicate it and all-reduce the gradient shards (docs/zero.md)")
                  .agreed().plan());
  t.push_back(flag("--grad-reduce-in-bf16", MEMBER(parallel.grad_reduce_in_bf16),
                   "reduce the data-parallel gradients in bf16 (half the bytes); tripod still accumulates "
                   "micro-batches in fp32 (docs/zero.md)")
                  .agreed());
  t.push_back(flag("--megatron-fsdp-grad-comm-dtype", MEMBER(parallel.fsdp_grad_comm_dtype),
                   "fp32 | bf16 | auto (the main-grads dtype): the dtype of the gradient reduction")
                  .agreed());
  t.push_back(flag("--megatron-fsdp-main-grads-dtype", MEMBER(parallel.fsdp_main_grads_dtype),
                   "fp32 | bf16 | auto (the compute dtype): sets what auto communicates; tripod accumulates "
                   "gradients in fp32 whatever it says")
                  .agreed());
  t.push_back(flag("--megatron-fsdp-main-params-dtype", MEMBER(parallel.fsdp_main_params_dtype),
                   "fp32 (tripod's main parameters are fp32; auto means fp32 only in an fp32 run)")
                  .agreed());
  t.push_back(flag("--outer-dp-sharding-strategy", MEMBER(parallel.outer_dp_sharding_strategy),
                   "no_shard: the distributed-optimizer instances replicate (--num-distributed-optimizer-instances)")
                  .agreed());
  t.push_back(flag("--ddp-bucket-size", MEMBER(parallel.ddp.bucket_size),
                   "elements per data-parallel gradient bucket (default max(4e7, 1e6 x dp); with "
                   "--overlap-grad-reduce only, else one bucket)").agreed());
  t.push_back(flag("--overlap-grad-reduce", MEMBER(parallel.ddp.overlap_grad_reduce),
                   "start each bucket's dp reduction in the last micro-batch's backward, as soon as its grads are "
                   "final").agreed());
  t.push_back(flag("--overlap-param-gather", MEMBER(parallel.ddp.overlap_param_gather),
                   "distributed optimizer: all-gather updated params per bucket asynchronously, waited for by the "
                   "next forward").agreed());
  t.push_back(flag("--distributed-backend", MEMBER(parallel.distributed_backend),
                   "nccl (default on cuda; on cpu taken as gloo) | gloo (cpu default; on cuda: device buffers staged through host memory, "
                   "ranks may share a GPU to rehearse a layout)"));
  t.push_back(flag("--distributed-timeout-minutes", MEMBER(parallel.distributed_timeout_minutes),
                   "timeout of every collective and store wait").defaulted());
  // ---- device and precision ----
  t.push_back(flag("--device", MEMBER(device),
                   "cpu | cuda (default: cuda when a GPU is visible and the build has CUDA)", S::TripodOnly)
                  .agreed());
  t.push_back(flag("--bf16", MEMBER(precision.bf16), "bf16 compute, fp32 master weights (cuda; emulated on cpu)").agreed());
  t.push_back(flag("--deterministic-mode", MEMBER(deterministic_mode),
                   "bitwise-repeatable kernels where the backend has a choice (cuda: cuDNN attention's "
                   "deterministic dQ, the word embedding's gradient without atomics)"));
  t.push_back(flag("--fp16", MEMBER(precision.fp16), "fp16 compute with loss scaling (cuda; emulated on cpu)").agreed());
  t.push_back(flag("--loss-scale", MEMBER(precision.loss_scaler.static_scale),
                   "fp16: static loss scale (default: dynamic)").agreed());
  t.push_back(flag("--initial-loss-scale", MEMBER(precision.loss_scaler.initial_scale),
                   "fp16: first dynamic loss scale").agreed().defaulted());
  t.push_back(flag("--min-loss-scale", MEMBER(precision.loss_scaler.min_scale), "fp16: lowest dynamic loss scale")
                  .agreed().defaulted());
  t.push_back(flag("--loss-scale-window", MEMBER(precision.loss_scaler.window),
                   "fp16: clean iterations before the scale doubles").agreed().defaulted());
  t.push_back(flag("--hysteresis", MEMBER(precision.loss_scaler.hysteresis),
                   "fp16: overflows tolerated before the scale halves").agreed().defaulted());
  // FP8 (config/fp8_config.h, docs/fp8.md).
  t.push_back(flag("--fp8-format", MEMBER(precision.fp8_format),
                   "FP8 GEMMs in the transformer layers' linears: hybrid (E4M3 forward, E5M2 gradients) | e4m3")
                  .agreed().plan());
  t.push_back(flag("--fp8-recipe", MEMBER(precision.fp8_recipe),
                   "delayed (scales from the amax history) | tensorwise (each tensor's own amax) | blockwise "
                   "(a scale per 1x128 block of activations and gradients, per 128x128 weight tile); mxfp8 "
                   "is not supported")
                  .agreed().plan().defaulted());
  t.push_back(flag("--fp8-margin", MEMBER(model.fp8.margin), "scale = fp8_max / amax / 2^margin (delayed, tensorwise)").agreed().defaulted());
  t.push_back(flag("--fp8-amax-history-len", MEMBER(model.fp8.amax_history_len),
                   "delayed scaling: iterations of amax history per tensor").agreed().defaulted());
  t.push_back(flag("--fp8-amax-compute-algo", MEMBER(precision.fp8_amax_compute_algo),
                   "delayed scaling: most_recent | max of the history").agreed().defaulted());
  t.push_back(flag("--first-last-layers-bf16", MEMBER(model.fp8.first_last_layers_bf16),
                   "with --fp8-format: keep the first and last layers' GEMMs in high precision").agreed().plan());
  t.push_back(flag("--num-layers-at-start-in-bf16", MEMBER(model.fp8.num_layers_at_start_in_bf16),
                   "with --first-last-layers-bf16: layers at the start kept out of FP8").agreed().plan().defaulted());
  t.push_back(flag("--num-layers-at-end-in-bf16", MEMBER(model.fp8.num_layers_at_end_in_bf16),
                   "with --first-last-layers-bf16: layers at the end kept out of FP8").agreed().plan().defaulted());
  t.push_back(flag("--fp8-param-gather", MEMBER(model.fp8.param_gather),
                   "with --fp8-format and the distributed optimizer (optim or optim_grads): the FP8 layers' linear "
                   "weights are cast to FP8 from each rank's fp32 master shard and all-gathered as FP8 codes, 1 "
                   "byte per element instead of 4 (docs/fp8.md)")
                  .agreed().plan());
  t.push_back(flag("--fp8-dot-product-attention", MEMBER(model.fp8.dot_product_attention),
                   "with --fp8-format and --fp8-recipe delayed: the FP8 layers' attention core runs on FP8 Q, K, V "
                   "(cuDNN's FP8 attention on CUDA; docs/fp8.md); not with context parallelism yet")
                  .agreed().plan());
  t.push_back(flag("--no-fp8-wgrad", MEMBER(model.fp8.high_precision_wgrad),
                   "with --fp8-format: the FP8 layers' weight-gradient GEMMs run in the compute dtype on the "
                   "unquantized input and output gradient (forward and dgrad stay FP8; docs/fp8.md)")
                  .agreed().plan());
  t.push_back(flag("--recompute-activations", MEMBER(parallel.recompute_activations),
                   "selective recompute: the attention core is recomputed in backward").agreed());
  t.push_back(flag("--recompute-granularity", MEMBER(parallel.recompute_granularity),
                   "full (rerun each layer's forward in backward) | selective").agreed());
  t.push_back(flag("--peak-tflops", MEMBER(logging.peak_tflops),
                   "peak TFLOP/s for MFU (default: 989 on cuda, none on cpu)", S::TripodOnly));
  t.push_back(flag("--profile", MEMBER(logging.profile),
                   "open the CUDA profiler API's capture range over --profile-step-start..end on --profile-ranks "
                   "(for `nsys profile -c cudaProfilerApi`)"));
  t.push_back(flag("--profile-step-start", MEMBER(logging.profile_step_start),
                   "with --profile: the range opens before this 0-based iteration").defaulted());
  t.push_back(flag("--profile-step-end", MEMBER(logging.profile_step_end),
                   "with --profile: the range closes after this iteration (counted from 1, as the log)").defaulted());
  t.push_back(flag("--profile-ranks", MEMBER(logging.profile_ranks), "with --profile: the global ranks profiled")
                  .defaulted());
  // ---- checkpoints and stopping ----
  t.push_back(flag("--save", MEMBER(checkpoint.save), "checkpoint directory"));
  t.push_back(flag("--load", MEMBER(checkpoint.load), "checkpoint directory to resume from (any layout)"));
  t.push_back(flag("--save-interval", MEMBER(checkpoint.save_interval), "save every N iterations (and at the end)")
                  .agreed());
  t.push_back(flag("--save-retain", MEMBER(checkpoint.save_retain),
                   "keep only the last K checkpoints of this run (0: all)", S::TripodOnly));
  t.push_back(flag("--save-into-existing", MEMBER(checkpoint.save_into_existing),
                   "save into a --save folder that holds another run's checkpoints (refused without it)",
                   S::TripodOnly));
  t.push_back(flag("--finetune", MEMBER(checkpoint.finetune),
                   "load weights only; start at iteration 0 with a fresh optimizer").agreed());
  t.push_back(flag("--no-load-optim", MEMBER(checkpoint.no_load_optim), "do not load the optimizer state").agreed());
  t.push_back(flag("--no-load-rng", MEMBER(checkpoint.no_load_rng), "do not load the RNG state").agreed());
  t.push_back(flag("--ckpt-step", MEMBER(checkpoint.ckpt_step),
                   "with --load: resume from iteration N instead of the latest").agreed());
  t.push_back(flag("--exit-signal-handler", MEMBER(checkpoint.exit_signal_handler),
                   "exit 0 after the stop SIGTERM/SIGINT always cause (the iteration ends, --save saves); "
                   "without it the exit code is 128 + the signal").agreed());
  t.push_back(flag("--exit-interval", MEMBER(checkpoint.exit_interval),
                   "save (with --save) and exit 0 at a multiple of N iterations").agreed());
  t.push_back(flag("--exit-duration-in-mins", MEMBER(checkpoint.exit_duration_in_mins),
                   "save (with --save) and exit 0 at the first iteration boundary after M minutes"));
  // ---- the command line itself ----
  t.push_back(flag("--help", nullptr, "print the flags and exit"));
  t.back().takes = FlagTakes::None;
  t.push_back(flag("--config", nullptr,
                   "flag file: flags one or more per line, ${ENV} and ${ENV:-default} substituted; later "
                   "command-line flags override it", S::TripodOnly));
  t.back().takes = FlagTakes::Value;
  // ---- testing aids (hidden) ----
  t.push_back(flag("--dump-weights", MEMBER(dump_weights),
                   "after training, write each rank's parameter shards to DIR/rank<N>.bin (parity checks)",
                   S::TripodOnly).testing_aid());
  t.push_back(flag("--inject-grad-overflow-at", MEMBER(inject_grad_overflow_at),
                   "make the gradients of iteration N non-finite (checks the fp16 skip and the NaN stop)",
                   S::TripodOnly).testing_aid());
}

#undef MEMBER

std::vector<FlagRow> build_table() {
  std::vector<FlagRow> t;
  append_tripod_rows(t);
  TrainArgs probe;
  for (auto& r : t) {
    if (!r.bound()) continue;
    const FlagRef ref = r.member(probe);
    r.takes = std::holds_alternative<bool*>(ref)                       ? FlagTakes::None
              : std::holds_alternative<std::vector<std::string>*>(ref) ? FlagTakes::List
                                                                       : FlagTakes::Value;
  }
  for (const auto& list : {megatron_accepted_planned_rows(), megatron_rejected_rows()})
    for (const MegatronRow& m : list) {
      FlagRow r;
      r.name = m.name;
      r.takes = m.takes;
      r.status = m.status;
      r.text = m.note;
      r.feature = m.feature;
      t.push_back(r);
    }
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < t.size(); ++i)
    TRIPOD_CHECK(seen.emplace(t[i].name, i).second, "flag table: {} has two rows", t[i].name);
  return t;
}

}  // namespace

const std::vector<FlagRow>& flag_table() {
  static const std::vector<FlagRow> table = build_table();
  return table;
}

const FlagRow* find_flag(const std::string& name) {
  for (const auto& r : flag_table())
    if (name == r.name) return &r;
  return nullptr;
}

std::string flag_value(const FlagRow& row, const TrainArgs& a) {
  if (row.agreed_value) return row.agreed_value(a);
  if (!row.bound()) return "";
  // The member functions take a mutable TrainArgs (the parser writes
  // through them); reading through one changes nothing.
  const FlagRef ref = row.member(const_cast<TrainArgs&>(a));
  return std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, bool>) return on_off(*p);
        else if constexpr (std::is_same_v<T, std::string>) return *p;
        else if constexpr (std::is_same_v<T, std::vector<std::string>>) return fmt::format("{}", fmt::join(*p, " "));
        else return fmt::format("{}", *p);
      },
      ref);
}

const char* to_string(FlagTakes t) {
  switch (t) {
    case FlagTakes::None: return "—";
    case FlagTakes::Value: return "value";
    case FlagTakes::List: return "list";
  }
  return "?";
}

const char* to_string(FlagStatus s) {
  switch (s) {
    case FlagStatus::Implemented: return "implemented";
    case FlagStatus::TripodOnly: return "tripod only";
    case FlagStatus::Accepted: return "accepted";
    case FlagStatus::Planned: return "planned";
    case FlagStatus::Rejected: return "rejected";
  }
  return "?";
}

}  // namespace tripod::train
