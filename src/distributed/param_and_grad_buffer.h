// The data-parallel parameter/gradient buffer of one model chunk and its
// buckets (Megatron-core's _ParamAndGradBuffer and bucket groups in
// distributed/param_and_grad_buffer.py; --ddp-bucket-size,
// --overlap-grad-reduce, --overlap-param-gather).
//
// The chunk's flat f32 grad buffer (model/param_table.h, ParamStore::grads())
// is cut into buckets at parameter boundaries, walking the parameters in
// reverse (backward) order, so bucket 0 holds the last layers, whose
// gradients are final first. Each bucket is reduced over dp by one
// collective: all-reduce in place, or, with the distributed optimizer,
// reduce-scatter into this rank's piece of the bucket.
//
// Distributed-optimizer shard layout (as Megatron): each bucket is padded to
// a multiple of dp and split dp ways; rank r owns piece r of every bucket.
// This rank's optimizer shard is the concatenation of its pieces in bucket
// order (shard()). With one bucket it is [r n/dp, (r+1) n/dp) of the padded
// buffer, the layout without buckets. Buckets whose size is not a multiple
// of dp go through a zero-padded staging copy (the ParamStore buffer has no
// gaps between parameters).
//
// Per iteration: reset() -> register_grad_ready() as the backward makes
// gradients final (launches complete buckets) -> start_grad_sync() (the rest)
// -> finish_grad_sync(); after the optimizer step, with the distributed
// optimizer, start_param_sync() -> finish_param_sync() (per parameter group
// from the next forward, or all at once).
//
// NOTE [Expert buckets]
// With expert parallelism each rank holds only its ep rank's experts
// (model/gpt_model.cpp), which the other ranks of its ep group do not
// hold: their gradients are summed over the expert-data-parallel group
// (edp: the ranks holding the same experts), not dp. As Megatron's
// separate expert buffers (expert_parallel_buffers in
// distributed_data_parallel.py), a bucket holds either experts only or no
// expert, and each bucket has its group: dp, or edp for experts. The
// distributed optimizer's shard is then this rank's piece of every bucket,
// 1/dp of a dense bucket and 1/edp of an expert one; ZeRO-2/-3 likewise.
//
// Relates to: distributed/distributed_data_parallel.h (one buffer per chunk,
// the backward hooks), distributed/distributed_optimizer.h (the shard it
// steps), model/param_table.h (the flat buffers), comm/communicator.h (async
// Work), docs/parallelism.md (overlap section).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/ops.h"
#include "comm/communicator.h"
#include "model/param_table.h"
#include "optim/adamw.h"

namespace tripod::distributed {

// Buckets [begin, end) of the flat buffer holding parameters [first_param,
// end_param) (indices in ParamStore order).
struct BucketRange {
  int64_t begin = 0, end = 0;
  int first_param = 0, end_param = 0;
  int64_t numel() const { return end - begin; }
};

// Megatron's split: walk the parameters from last to first, adding each to
// the open bucket, and close the bucket as soon as it holds >= bucket_size
// elements (so a bucket exceeds the limit by less than its last-added, i.e.
// lowest-offset, parameter). A parameter with alone[i] set gets a bucket of
// its own (Megatron does this for the shared embedding). bucket_size <= 0:
// one bucket. The first bucket also takes the buffer's tail padding
// [last param end, padded_numel). Returned in launch order: bucket 0 ends at
// padded_numel, the last one starts at 0.
// group_of (optional, one per parameter): a bucket never holds parameters
// of two groups (ZeRO-3's per-layer buckets: a run of parameters of one
// model::GptModel::param_groups() entry per bucket).
std::vector<BucketRange> split_buckets(const std::vector<int64_t>& offsets, const std::vector<int64_t>& numels,
                                       int64_t padded_numel, int64_t bucket_size, const std::vector<bool>& alone,
                                       const std::vector<int>* group_of = nullptr);

// Megatron's default when --ddp-bucket-size is not given: max(4e7, 1e6 x dp)
// elements, used only with --overlap-grad-reduce (else one bucket).
int64_t default_bucket_size(int dp_size);

class ParamAndGradBuffer {
 public:
  // deferred[i]: parameter i needs a reduction over another group before the
  // dp one (the tied embedding over the embedding group): it gets its own
  // bucket, which register_grad_ready never launches; start_grad_sync() does.
  // dp: the data-parallel group (its size sets the shard split).
  // expert_dp (expert parallelism, NOTE [Expert buckets]): the
  // expert-data-parallel group the buckets of experts reduce and shard over.
  // shard_grads (ZeRO-2, needs distributed_optimizer): NOTE [Sharded
  // gradients]; shard_params (ZeRO-3, needs shard_grads): NOTE [Sharded
  // parameters]; group_of: as split_buckets (ZeRO-3 passes the layer groups).
  ParamAndGradBuffer(model::ParamStore& params, comm::Communicator& dp, backend::Backend& be, int64_t bucket_size,
                     bool distributed_optimizer, const std::vector<bool>& deferred, bool shard_grads = false,
                     bool shard_params = false, const std::vector<int>* group_of = nullptr,
                     comm::Communicator* expert_dp = nullptr);
  ~ParamAndGradBuffer();
  ParamAndGradBuffer(const ParamAndGradBuffer&) = delete;
  ParamAndGradBuffer& operator=(const ParamAndGradBuffer&) = delete;

  model::ParamStore& params() { return params_; }
  const model::ParamStore& params() const { return params_; }

  const std::vector<BucketRange>& buckets() const { return buckets_; }
  bool distributed() const { return distributed_; }

  // ---- shard layout (the whole buffer unless distributed) ----
  // Elements of this rank's optimizer shard (with padding).
  int64_t shard_numel() const { return shard_numel_; }
  // Segments of the shard covering the parameters keep() selects, with each
  // parameter's weight-decay flag (or all flagged true when decay_flags is
  // false, so that neighbours merge), merged.
  std::vector<optim::Segment> shard_segments(const std::function<bool(const model::Param&)>& keep,
                                             bool decay_flags = true) const;
  // shard <- this rank's pieces of full (padded_numel, flat-buffer order).
  void take_shard(Tensor& shard, const Tensor& full) const;
  // full <- the pieces of every rank (collective over dp; synchronous).
  void gather_shards(Tensor& full, const Tensor& shard);

  // ---- gradient reduction, once per iteration ----
  // NOTE [bf16 gradient communication] (--grad-reduce-in-bf16,
  // --megatron-fsdp-grad-comm-dtype bf16): each bucket's f32 gradients are
  // cast to bf16 for the reduction (all-reduce or reduce-scatter, half the
  // bytes) and the result cast back to f32 where the f32 reduction would
  // have written it. Accumulation over micro-batches stays f32, as the
  // shard's accumulation under ZeRO-2/3; the inter-instance all-reduce of
  // hybrid sharding stays f32. F32 (the default): no casts.
  void set_grad_comm_dtype(DType dtype);
  DType grad_comm_dtype() const { return comm_dtype_; }
  void reset();  // every bucket pending again
  // The gradients of these parameters are final: launches every bucket that
  // became complete (deferred ones excepted), in the order they complete.
  void register_grad_ready(const std::vector<size_t>& params);
  void start_grad_sync();   // launches every bucket not launched yet, in bucket order
  void finish_grad_sync();  // waits for every launched bucket
  // Hybrid sharding (NOTE [Distributed-optimizer instances] in
  // parallel/groups.h): dp above is one instance; finish_grad_sync() then
  // sums the reduced shard over the instances (one all-reduce per
  // iteration, after the last bucket; ZeRO-2/3 after the accumulation).
  void set_inter_instance_group(comm::Communicator* inter) { inter_ = inter; }
  bool all_grads_ready() const;

  // ---- sharded gradients (ZeRO-2 and -3) ----
  // NOTE [Sharded gradients]: no full gradient buffer lives across
  // micro-batches. bind_grads(b) gives bucket b a zeroed full-size buffer
  // (the Param::grad views point into it) before a backward writes it;
  // register_grad_ready launches its reduce-scatter into a piece-sized
  // buffer once the micro-batch's backward wrote all its parameters; when
  // that is waited for (the next launch or bind of the bucket, or
  // finish_grad_sync) the piece is added into the fp32 shard and the full
  // buffer freed. Over micro-batches m = 0..M-1 the shard holds
  // ((0 + RS(g_0)) + RS(g_1)) + ... + RS(g_{M-1}), RS summing over dp ranks:
  // another order than the distributed optimizer's RS(g_0 + ... + g_{M-1}).
  // Deferred buckets (the tied embedding) keep a whole buffer for the step.
  bool shards_grads() const { return shard_grads_; }
  void bind_grads(size_t b);
  bool grads_bound(size_t b) const { return grad_bucket_[b].defined(); }
  // Full-size gradient elements bound right now (tests, memory checks).
  int64_t bound_grad_numel() const;

  // ---- sharded parameters (ZeRO-3) ----
  // NOTE [Sharded parameters]: at rest this rank keeps only value_shard()
  // (its pieces of the fp32 parameters, which the optimizer steps); the
  // ParamStore's flat value buffer is released. start_gather(b) launches the
  // all-gather of bucket b into a fresh full-size buffer (async: the
  // prefetch), wait_gather_params(b) waits for it, casts the compute copy
  // and binds the Param views; release_params(b) unbinds and frees it.
  // NOTE [Compute-dtype all-gather]: under bf16/fp16 the gather moves the
  // compute copy, not the fp32 values: each rank casts its piece and the
  // all-gather fills the bucket's compute copy (half the bytes; the same
  // bits as gathering fp32 and casting, the cast being per element). The
  // parameters that compute with their fp32 value (reads_fp32_value: the
  // LayerNorms, NOTE [fp32 LayerNorm params]; the MoE router) come in a
  // second, small all-gather of fp32 (each rank's part of them, padded to
  // the longest part); the other parameters' Param::value stays unbound
  // while gathered (nothing reads it: they compute with Param::compute).
  bool shards_params() const { return shard_params_; }
  bool gathers_compute_dtype() const { return gather_compute_; }
  Tensor& value_shard() { return value_shard_; }
  // ZeRO-3 built without flat values: this rank's shard of the initial
  // parameters, one parameter at a time (NOTE [Sharded init]).
  void init_shard(uint64_t seed, float std, int64_t num_layers);
  // A checkpoint load without whole values (NOTE [Streamed shard load]):
  // for each parameter that overlaps this rank's pieces, local_value(p)
  // gives its tp-local value (host f32, p.shape) and this rank's part of it
  // goes into `shard` (value_shard(), or an optimizer moment laid out as
  // it). Parameters this rank holds nothing of are never asked for; the
  // padding between parameters is left as it is.
  void fill_shard(Tensor& shard, const std::function<Tensor(const model::Param&)>& local_value);
  // A checkpoint save without whole values or moments (NOTE [Streamed
  // shard save] in distributed_optimizer.cpp): where elements [begin,
  // begin + numel) of the flat buffer, inside bucket b, lie in the shards
  // of the ranks of b's group: for each rank holding part of them, that
  // part's buffer offset, length and offset in the rank's shard.
  struct ShardPart {
    int rank = 0;
    int64_t begin = 0, numel = 0, shard_offset = 0;
  };
  std::vector<ShardPart> shard_parts(size_t b, int64_t begin, int64_t numel) const;
  void start_gather(size_t b);
  void wait_gather_params(size_t b);
  void release_params(size_t b);
  bool params_gathered(size_t b) const { return gathered_[b].defined() && !z3_work_[b]; }
  bool gather_in_flight(size_t b) const { return z3_work_[b] != nullptr; }
  int64_t gathered_numel() const;  // full-size parameter elements held right now
  // Whole parameters in the ParamStore's flat buffers (weight dumps, the MoE
  // expert-bias update; a checkpoint save streams from the shards instead),
  // then back to shards (take_back: the shard from the full values first,
  // after something wrote them).
  void materialize_params();
  void unmaterialize_params(bool take_back);
  // Which buckets hold parameters of this parameter index.
  int bucket_of(size_t param) const { return bucket_of_[param]; }
  // Bucket b's piece per rank (padded numel / its group's size), where this
  // rank's piece sits in the shard, and the group that shards the bucket
  // (dp, or edp for experts): distributed/fp8_param_gather.h.
  int64_t piece_len(size_t b) const { return piece_len_[b]; }
  int64_t shard_offset(size_t b) const { return shard_offset_[b]; }
  comm::Communicator& bucket_group(size_t b) const { return comm_of(b); }
  // Called at every gather start, gather wait and release (tests: the
  // prefetch order). what: 0 start, 1 waited, 2 released.
  std::function<void(int bucket, int what)> on_gather;
  // The dp-reduced gradients of this rank's shard (distributed), else grads().
  Tensor& reduced_grads();
  // Called as each bucket is launched, with its index (tests, tracing).
  std::function<void(int bucket)> on_launch;

  // ---- parameter all-gather (distributed optimizer) ----
  // Launches the all-gather of every bucket from value_shard into values(),
  // async, in forward order (last bucket first).
  void start_param_sync(const Tensor& value_shard);
  // Waits for the buckets holding these parameters (and casts their compute
  // copies under bf16/fp16). No-op for buckets already gathered.
  void finish_param_sync(const std::vector<size_t>& params);
  void finish_param_sync();  // waits for all
  bool param_sync_pending() const;
  // NOTE [FP8 parameter all-gather] (distributed/fp8_param_gather.h): these
  // parameters' f32 values stay out of the all-gather above (their FP8 codes
  // are gathered instead): each bucket holding one gathers the other
  // parameters' elements of every rank's piece, packed (padded to the
  // longest rank's part; a bucket where that is over half a piece gathers
  // whole, as without the flag), and this rank's own piece is copied
  // locally, so values() holds every rank's pieces of the others and this
  // rank's piece of all; materialize_params() gathers the whole values
  // (checkpoints).
  // Defined in fp8_param_gather.cpp.
  void skip_in_param_sync(const std::vector<size_t>& params);
  bool skips_params() const { return skips_params_; }

 private:
  void launch(size_t b);
  void wait_gather(size_t b);
  Tensor input_of(size_t b, const Tensor& full);  // the padded bucket view, or its staging copy

  model::ParamStore& params_;
  comm::Communicator& dp_;
  backend::Backend& be_;
  bool distributed_;
  std::vector<BucketRange> buckets_;
  std::vector<bool> expert_;              // per parameter: an MoE expert's (ParamSpec::expert >= 0)
  std::vector<comm::Communicator*> comm_;  // per bucket: dp, or edp for a bucket of experts
  comm::Communicator& comm_of(size_t b) const { return *comm_[b]; }
  int size_of(size_t b) const { return comm_[b]->size(); }
  int rank_of(size_t b) const { return comm_[b]->rank(); }
  std::vector<int> bucket_of_;           // per parameter
  std::vector<int64_t> piece_len_;       // per bucket: padded numel / dp (distributed)
  std::vector<int64_t> shard_offset_;    // per bucket: where its piece sits in the shard
  std::vector<Tensor> staging_;          // per bucket: (padded) when numel % dp != 0, else undefined
  std::vector<bool> deferred_;           // per bucket
  int64_t shard_numel_ = 0;
  Tensor grad_shard_;                    // (shard_numel) distributed only
  comm::Communicator* inter_ = nullptr;  // the other instances' same shard (not owned)
  bool inter_reduced_ = false;           // per iteration: grad_shard_ summed over inter_
  // per iteration
  std::vector<int> pending_;             // per bucket: parameters not final yet
  std::vector<bool> param_ready_;
  std::vector<std::shared_ptr<comm::Work>> grad_work_, gather_work_;
  // sharded gradients / parameters
  void finish_bucket_grad(size_t b);  // wait, add the piece into the shard, free the full buffer
  bool shard_grads_ = false, shard_params_ = false;
  std::vector<Tensor> grad_bucket_;  // per bucket: (padded) full-size gradients while bound
  std::vector<Tensor> rs_piece_;     // per bucket: the reduce-scatter's output while in flight
  DType comm_dtype_ = DType::F32;    // NOTE [bf16 gradient communication]
  std::vector<Tensor> comm_send_, comm_recv_;  // per bucket, bf16 communication: in flight
  Tensor to_comm_dtype(const Tensor& f32, int64_t padded);  // a bf16 copy, zero past f32's end
  void finish_unsharded_grad(size_t b);  // waits for bucket b (not ZeRO-2/3) and casts back
  Tensor value_shard_;               // (shard_numel) ZeRO-3: the parameters at rest
  std::vector<Tensor> gathered_, gathered_compute_;  // per bucket: (padded) while gathered
  std::vector<std::shared_ptr<comm::Work>> z3_work_;
  // NOTE [Compute-dtype all-gather]; per bucket:
  bool gather_compute_ = false;
  std::vector<std::vector<size_t>> fp32_params_;  // the parameters gathered in fp32 too
  std::vector<int64_t> fp32_part_len_;            // the longest rank's part of them
  std::vector<Tensor> z3_send_, fp32_send_, fp32_out_;  // in flight: this rank's cast piece, fp32 part, gathered parts
  std::vector<std::shared_ptr<comm::Work>> fp32_work_;
  void unpack_fp32(size_t b);  // fp32_out_ -> gathered_ (the fp32 parameters, packed)
  // NOTE [FP8 parameter all-gather]; per bucket: the kept parameters'
  // [begin, end) runs of each rank's piece (flat-buffer offsets; empty: the
  // bucket gathers as usual), the longest rank's total, and in flight the
  // packed send and receive buffers.
  std::vector<std::vector<std::vector<std::pair<int64_t, int64_t>>>> packed_runs_;
  std::vector<int64_t> packed_len_;
  std::vector<Tensor> packed_send_, packed_recv_;
  bool skips_params_ = false;
  void start_packed_sync(size_t b, const Tensor& value_shard);
  void finish_packed_sync(size_t b);
};

}  // namespace tripod::distributed
