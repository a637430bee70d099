// The FP8 parameter all-gather (Megatron's --fp8-param-gather with
// Transformer Engine's FP8 weights; docs/fp8.md, "--fp8-param-gather").
//
// NOTE [FP8 parameter all-gather]
// With the distributed optimizer each rank steps its shard of the fp32
// master weights and the all-gather brings every rank the whole weights.
// For the weights the FP8 GEMMs consume (qkv, proj, fc1, fc2 of the FP8
// layers) the GEMMs only read the FP8 codes, so each rank casts its shard
// of such a weight to FP8 straight from the fp32 master (no bf16 step in
// between, as Transformer Engine's cast of the master shard in the
// optimizer step) and the all-gather moves the codes: 1 byte per element.
// The scale is the weight's:
//   tensorwise  the whole tensor's amax: each rank's amax of its part of
//               the weight, max-reduced over the group that shards the
//               bucket (dp; edp for experts) and then over tp (which
//               splits the weight itself), then scale = fp8_max / amax /
//               2^margin; every rank casts its part with that one scale.
//   delayed     the scale as it stands (from the amax history); the parts'
//               amaxes accumulate into the weight's amax, which
//               Fp8State::end_iteration reduces over tp and dp (the dp
//               group contains the shard group) as it does today.
// Each rank packs the codes of its parts of the FP8 weights of a bucket
// (the longest rank's packed length, so 1 byte per element, plus padding
// up to the longest rank's part); the elements of the other parameters
// (norms, biases, the embedding) keep coming through the f32 gather, which
// leaves the FP8 weights out (ParamAndGradBuffer::skip_in_param_sync). The
// codes move as U8 (NCCL has no FP8 type) and are unpacked into one buffer
// per bucket holding its FP8 weights one after another (each 256-byte
// aligned for the FP8 GEMM), where the FP8 linears read them in place; the
// dgrad transpose is made from them (model::Fp8Linear::use_gathered_weight).
// The trainer gathers at the start of each step (after the FP8 state's
// begin_iteration) and before an evaluation, from this rank's pieces of the
// master values, which the optimizer step and a checkpoint load keep
// current (the other ranks' pieces of the FP8 weights there are stale
// until materialize_params gathers them for a save or a weight dump).
// Against the plain FP8 path the codes differ only by the rounding: master
// -> FP8 here, master -> bf16 -> FP8 there (the same code or the adjacent
// one; in fp32 the same).
//
// Relates to: distributed/param_and_grad_buffer.h (the shard layout),
// model/fp8_meta.h (the weight metas and the FP8 GEMMs).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "config/fp8_config.h"
#include "distributed/param_and_grad_buffer.h"
#include "model/fp8_meta.h"

namespace tripod::distributed {

class Fp8ParamGather {
 public:
  // One FP8 weight: its ParamStore index and its weight meta (E4M3).
  struct Weight {
    size_t param = 0;
    model::Fp8TensorMeta* meta = nullptr;
  };
  // tp: the group that splits the weights (null: tp size 1).
  Fp8ParamGather(ParamAndGradBuffer& buffer, backend::Backend& be, const config::Fp8Config& config,
                 std::vector<Weight> weights, comm::Communicator* tp);

  // After the optimizer step: casts this rank's part of every FP8 weight
  // from value_shard (the fp32 master shard) and all-gathers the codes of
  // each bucket that holds one (synchronous).
  void gather(const Tensor& value_shard);
  // gather() from the master weights in the buffer's values() (this rank's
  // pieces, which the distributed optimizer's step and a checkpoint load
  // keep current).
  void gather_from_values();
  // Weight k's gathered codes, in its Param's (local) shape.
  Tensor codes(size_t k) const;
  const std::vector<Weight>& weights() const { return weights_; }
  // The bytes this rank sends per gather (each bucket's packed part, the
  // longest rank's: about 1 per FP8 weight element of this rank's pieces).
  int64_t gathered_bytes() const;
  // The bytes this gather holds between gathers: the codes (1 per FP8
  // weight element, each weight 256-byte aligned; the linears' FP8 weight
  // copies are these, not copies of their own). The packed send and
  // receive buffers live during a bucket's gather only.
  int64_t buffer_bytes() const;

 private:
  // One FP8 weight's part [lo, hi) (flat-buffer offsets) in one rank's
  // piece, and where it sits in that rank's packed send buffer.
  struct Run {
    size_t weight = 0;
    int64_t lo = 0, hi = 0, pos = 0;
  };
  struct Bucket {
    size_t index = 0;
    std::vector<std::vector<Run>> runs;  // per rank of the bucket's group
    int64_t packed_len = 0;              // the longest rank's packed part (>= 1)
    std::vector<size_t> weights;         // the bucket's FP8 weights (indices into weights_)
    std::vector<int64_t> codes_offset;   // and where each one's codes start in `codes`
    int64_t codes_len = 0;
    Tensor codes;                        // (codes_len): the weights' codes, whole
  };
  ParamAndGradBuffer& buffer_;
  backend::Backend& be_;
  config::Fp8Config config_;
  std::vector<Weight> weights_;
  comm::Communicator* tp_;
  std::vector<Bucket> buckets_;  // those holding an FP8 weight, in forward order
  void run(const Tensor* value_shard);  // null: this rank's pieces of the buffer's values()
};

// --fp8-param-gather for one model chunk: the gather of the chunk's FP8
// linears' weights, which then read their codes from it; the buffer leaves
// those weights out of its f32 all-gather. Null for a chunk without FP8
// linears (--first-last-layers-bf16 can leave a pipeline stage none).
std::unique_ptr<Fp8ParamGather> make_fp8_param_gather(ParamAndGradBuffer& buffer, backend::Backend& be,
                                                      model::Fp8State& fp8, comm::Communicator* tp);

}  // namespace tripod::distributed
