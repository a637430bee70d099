// The parameter table: every parameter's global shape, how tensor-parallel
// ranks shard it, how it is initialised, and whether it is decayed. Plus the
// ParamStore that holds this rank's shards of the values and gradients in
// one flat f32 buffer each (so DP buckets, the distributed optimizer and the
// global norm work on contiguous ranges). With a bf16/f16 compute dtype it
// also holds a flat compute copy of the values (Megatron's mixed precision:
// fp32 master weights, half-precision weights for the forward/backward),
// refreshed by sync_compute() after every change of the master weights.
//
// NOTE [Layout-independent init]
// Element i of parameter `name` is drawn from a counter-based normal stream
// keyed by (seed, name), so the full tensor is the same for every layout and
// a rank's shard is a slice of it: TP x PP x DP runs start from the model
// the single-process run starts from, and checkpoints can be resharded.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/ops.h"
#include "tensor/tensor.h"

namespace tripod::model {

// How a tp rank takes its slice of the global tensor (Megatron's layers):
//   Rows    dim 0 split in tp chunks (column-parallel weight/bias, vocab-parallel embedding)
//   Cols    dim 1 split (row-parallel weight)
//   QkvRows dim 0 is [Q | K | V]; each third split in tp chunks, so the
//           shard is [Q_tp | K_tp | V_tp] and heads stay whole.
//   GluRows dim 0 is [gate | up] (SwiGLU's fc1); each half split in tp
//           chunks, so the shard is [gate_tp | up_tp].
//   QkvGroups grouped-query qkv in Megatron's layout, global shape
//           (G, k+2, HS[, C]): per query group its k query heads, then its K
//           and its V head. dim 0 (groups) is split in tp chunks and the
//           shard is laid out [Q_tp | K_tp | V_tp] rows as the attention op
//           takes it: local shape (G_tp (k+2) HS[, C]).
enum class ShardDim { None, Rows, Cols, QkvRows, GluRows, QkvGroups };
enum class InitKind { Normal, ScaledNormal, Zeros, Ones };

// What a parameter is in the model. Stage membership, the hook groups,
// resolve_params() (model/layer_params.h) and the LayerNorm rules go by it,
// never by the name (the name is the checkpoint key).
enum class ParamRole : uint8_t {
  None,  // a spec made outside the model's table (tests, checkpoint readers)
  WordEmbeddings, PositionEmbeddings,
  InputLayernormWeight, InputLayernormBias,
  LinearQkvWeight, LinearQkvBias, LinearProjWeight, LinearProjBias,
  // --qk-layernorm: self_attention.{q,k}_layernorm.{weight,bias} (HS), shared by the heads
  QLayernormWeight, QLayernormBias, KLayernormWeight, KLayernormBias,
  PreMlpLayernormWeight, PreMlpLayernormBias,
  LinearFc1Weight, LinearFc1Bias, LinearFc2Weight, LinearFc2Bias,
  FinalLayernormWeight, FinalLayernormBias,
  OutputLayerWeight,  // --untie-embeddings-and-output-weights: output_layer.weight
  // An MoE layer's MLP (model/moe_layer.h), in place of LinearFc1/Fc2:
  RouterWeight, RouterExpertBias,  // mlp.router.weight (E, C), mlp.router.expert_bias (E)
  ExpertFc1Weight, ExpertFc1Bias, ExpertFc2Weight, ExpertFc2Bias,  // mlp.experts.local_experts.<e>.*
  SharedExpertFc1Weight, SharedExpertFc1Bias, SharedExpertFc2Weight, SharedExpertFc2Bias,  // mlp.shared_experts.*
  SharedExpertGateWeight,  // mlp.shared_experts.gate_weight (1, C)
};

struct ParamSpec {
  std::string name;       // Megatron-core names, e.g. decoder.layers.0.mlp.linear_fc1.weight
  Shape global_shape;
  ShardDim shard = ShardDim::None;
  InitKind init = InitKind::Normal;
  bool weight_decay = true;  // false for biases and LayerNorm (Megatron's default)
  int layer = -1;            // transformer layer index, -1 for embedding / final norm
  ParamRole role = ParamRole::None;
  int expert = -1;           // an MoE layer's expert (global index), -1 for every other parameter
  // Replicated over tp but computed from each tp rank's own tokens under
  // --sequence-parallel (Megatron's `sequence_parallel` attribute): its
  // gradient is summed over tp, as the LayerNorms' (an MoE layer's router,
  // shared-expert gate and unsplit experts).
  bool sequence_parallel = false;
};

Shape local_shape(const ParamSpec& spec, int tp_size);
// LayerNorm weights and biases (by role): computed with in f32 even under
// bf16/fp16 (NOTE [fp32 LayerNorm params] in param_table.cpp).
bool is_layernorm(const ParamSpec& spec);
// The word embeddings (and their tied copy on the last stage) and the
// untied output layer: Megatron's is_embedding_or_output_parameter, which
// --decoupled-lr trains at its own learning rate.
inline bool is_embedding_or_output(const ParamSpec& spec) {
  return spec.role == ParamRole::WordEmbeddings || spec.role == ParamRole::OutputLayerWeight;
}
// The query/key norms of --qk-layernorm (a subset of is_layernorm): every tp
// rank holds them whole but normalises only its own heads, so their
// gradients are partial per tp rank at any tp > 1.
bool is_qk_layernorm(const ParamSpec& spec);
// Host tensors: the shard of `full` owned by tp_rank, and the inverse.
Tensor take_shard(const Tensor& full, ShardDim shard, int tp_size, int tp_rank);
void place_shard(Tensor& full, const Tensor& shard_values, ShardDim shard, int tp_size, int tp_rank);
// The full (unsharded) initial value of a parameter, f32 on the host.
Tensor init_full(const ParamSpec& spec, uint64_t seed, float std, int64_t num_layers);

struct Param {
  ParamSpec spec;
  Shape shape;   // local (this tp rank's) shape
  Tensor value;  // f32 master weight, a view into ParamStore::values()
  Tensor grad;   // f32 gradient, a view into ParamStore::grads()
  Tensor compute;  // the weight the model computes with: `value` itself in f32
                   // and for LayerNorm params, else a view into
                   // ParamStore::compute_values()
  int64_t offset = 0;  // element offset in the flat buffers
};

class ParamStore {
 public:
  // pad_multiple: the flat buffers are zero-padded to a multiple of it (the
  // dp size with the distributed optimizer, so they split evenly).
  // compute_dtype: f32 (compute on the master weights) or bf16/f16 (a cast copy).
  // flat_grads false: no gradient buffer until allocate_flat (ZeRO-2/-3);
  // flat_values false: no value buffers either (ZeRO-3's sharded init).
  ParamStore(std::vector<ParamSpec> specs, int tp_size, int tp_rank, backend::Backend& be,
             int64_t pad_multiple = 1, DType compute_dtype = DType::F32, bool flat_grads = true,
             bool flat_values = true);
  // This rank's tp part of parameter p's initial value (host, f32, p.shape):
  // what init() writes into p.value, for an initialization that writes
  // somewhere else (NOTE [Sharded init]).
  Tensor initial_value(const Param& p, uint64_t seed, float std, int64_t num_layers) const;
  std::vector<Param>& params() { return params_; }
  const std::vector<Param>& params() const { return params_; }
  // By name: for checkpoints and tests. The model resolves its parameters
  // once at construction (model/layer_params.h), never per call.
  Param& get(const std::string& name);
  const Param* find(const std::string& name) const;
  Tensor& values() { return values_; }  // (padded_numel) f32
  Tensor& grads() { return grads_; }    // (padded_numel) f32
  DType compute_dtype() const { return compute_dtype_; }
  // (padded_numel) in the compute dtype, at the offsets of values(): the
  // bf16/f16 copy, or values() itself in f32. Every element is a cast of its
  // master weight, LayerNorm params included (they compute with `value`, so
  // their copy is unused but kept in step).
  Tensor& compute_values() { return compute_values_; }
  // Copies the master weights into the compute copy (cast; no-op in f32).
  // Call after every update of values() that did not also write
  // compute_values() (the optimizer's fused update does: optim::AdamW::step
  // with a compute copy): load, init, the parameter all-gather. The
  // range form refreshes elements [begin, begin + numel) of the flat buffers
  // only (one bucket after its all-gather, one parameter after a load).
  void sync_compute();
  void sync_compute(int64_t begin, int64_t numel);
  int64_t numel() const { return numel_; }  // parameters held (without padding)
  int64_t padded_numel() const { return padded_numel_; }
  int tp_size() const { return tp_size_; }
  int tp_rank() const { return tp_rank_; }

  void init(uint64_t seed, float std, int64_t num_layers);
  void zero_grad();  // no-op while the flat grads are released

  // ---- storage owned elsewhere between uses ----
  // For a data-parallel scheme that keeps full parameters or gradients only
  // while a group of layers uses them (distributed/, docs/zero.md); the
  // model reads the views and never sees where they point.
  // Re-points the views of the parameters inside [begin, begin + numel) of
  // the flat buffers at `values`/`compute` (numel elements, the same offsets
  // relative to begin; compute ignored in f32) or at `grads`; undefined
  // tensors leave the views undefined (not usable until bound again).
  void bind_values(int64_t begin, int64_t numel, const Tensor& values, const Tensor& compute);
  void bind_grads(int64_t begin, int64_t numel, const Tensor& grads);
  // Frees the flat value (and compute) and/or grad buffers, unbinding every
  // view into them; allocate_flat() makes zeroed ones and binds every view
  // to them again (a checkpoint's full parameters).
  void release_flat(bool values, bool grads);
  void allocate_flat(bool values, bool grads);
  bool has_flat_values() const { return values_.defined(); }
  bool has_flat_grads() const { return grads_.defined(); }
  // Host copies of this rank's shard (for checkpoints and tests).
  Tensor value_to_host(const Param& p) const;
  Tensor grad_to_host(const Param& p) const;
  // Set this rank's shard from a host tensor holding the FULL parameter.
  void set_from_full(Param& p, const Tensor& full_host);

 private:
  std::vector<Param> params_;
  std::unordered_map<std::string, size_t> index_;
  Tensor values_, grads_;
  Tensor compute_values_;  // (padded_numel) compute dtype; values_ itself in f32
  DType compute_dtype_ = DType::F32;
  bool ln_cast_ = false;  // NOTE [fp32 LayerNorm params]: LayerNorms compute with the cast copy too
  int64_t numel_ = 0, padded_numel_ = 0;
  int tp_size_, tp_rank_;
  backend::Backend& be_;
};

}  // namespace tripod::model
