// Search over parallel layouts: every TP x PP x DP (x micro-batch, virtual
// pipeline, recompute, sequence parallel, sharding strategy) that obeys
// the layout rules, kept when its predicted memory fits one GPU, ordered
// best first with the reasons spelled out. Backs `tripod plan`; the trainer
// can call plan_layouts() to suggest a layout after an out-of-memory error.
//
// Rules (mission step 5, and what the trainer itself checks):
//   DP = world / (TP x PP); TP divides the GPUs of a node (kept on NVLink)
//   unless allow_tp_across_nodes; heads % TP == 0; ffn % TP == 0;
//   seq % TP == 0 with SP; layers % (PP x vpp) == 0; vpp > 1 needs PP >= 2
//   and micro-batches % PP == 0 (tripod's and Megatron's interleaved
//   schedule); global % (micro x DP) == 0; EP (MoE) divides the experts
//   and DP, with TP 1.
// Order: by predicted step time (times within 1% count as equal), then plain
// DP (TP = PP = 1: no TP all-reduces, no bubble) before model parallelism,
// then fewer moving parts (no vpp, less recompute, less sharding: ZeRO-2
// counts one, ZeRO-3 two), then less memory. The
// notes describe row 1 in those terms (whether plain DP fits, with or
// without the distributed optimizer, and where it ranks).
//
// Usage:
//   plan::SearchOptions o; o.global_batch = 512;
//   auto r = plan::plan_layouts(model, machine, o);
//   for (auto& c : r.fits) fmt::print("{} {}\n", c.layout.str(), c.mem.total());
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "plan/memory_model.h"
#include "plan/time_model.h"

namespace tripod::plan {

enum class Choice { kSearch, kOn, kOff };

struct SearchOptions {
  int64_t global_batch = 512;
  int64_t micro_batch = 0;  // 0: search 1, 2, 4, ... that divide global / DP
  int tp = 0, pp = 0;       // 0: search
  // --context-parallel-size: > 0 pinned; 0: 1, and when no layout fits,
  // the search again over CP 2, 4, ... (long sequences).
  int cp = 0;
  config::CpCommType cp_comm = config::CpCommType::P2p;  // --cp-comm-type of the CP layouts
  // --expert-model-parallel-size: > 0 pinned; 0: for an MoE model every ep
  // that divides both the experts and DP (TP 1: tripod carves ep out of
  // the data-parallel ranks, Megatron's folding onto tp x dp is not
  // searched), 1 for a dense one.
  int ep = 0;
  std::vector<int> vpp = {1, 2, 4};
  std::vector<Recompute> recompute = {Recompute::None, Recompute::Selective, Recompute::Full};
  Choice sequence_parallel = Choice::kOn;  // kOn: on whenever TP > 1 (same comm volume, less memory)
  // kSearch: every layout with dp > 1 is tried with each sharding strategy,
  // no_shard, optim, optim_grads (ZeRO-2) and optim_grads_params (ZeRO-3),
  // each with its memory (estimate_memory) and its time (ZeRO-2: a
  // reduce-scatter per micro-batch; ZeRO-3 also the parameter all-gathers,
  // zero3_param_gather_seconds); kOn: optim only; kOff: no_shard only.
  Choice distributed_optimizer = Choice::kSearch;
  // 2 / 3: every layout with dp > 1 uses ZeRO-2 / ZeRO-3
  // (--data-parallel-sharding-strategy given to plan); 0: as
  // distributed_optimizer says.
  int zero_stage = 0;
  // --num-distributed-optimizer-instances N: sharded layouts shard within N
  // instances (layouts whose dp x cp N does not divide are skipped).
  int dist_opt_instances = 1;
  bool overlap_param_gather = false;  // ZeRO-3's prefetch (Layout::overlap_param_gather)
  bool allow_tp_across_nodes = false;
  DType dtype = DType::BF16;  // --bf16 / --fp16 / --fp32, for every searched layout
  MemoryOptions memory;
};

struct Candidate {
  Layout layout;
  MemoryBreakdown mem;
  TimeBreakdown time;
  double tokens_per_second = 0;
  double mfu = 0;  // model FLOPs / (step time x peak x world)
  bool fits = false;
  std::vector<std::string> reasons;
};

struct PlanResult {
  std::vector<Candidate> fits;  // best first
  int64_t valid_layouts = 0;    // obeyed the rules
  int64_t too_big = 0;          // obeyed the rules but did not fit
  bool plain_dp_fits = false;
  std::optional<Candidate> smallest;  // least memory of all valid layouts (when nothing fits)
  std::vector<std::string> notes;     // whole-plan remarks ("model fits one GPU: ...")
};

// `m` is finalized (GptConfig::finalize); every function below reads it as is.
// Empty when `l` obeys every rule for this model and machine, else why not.
std::string layout_rule_violation(const GptConfig& m, const Machine& mc, const Layout& l,
                                  bool allow_tp_across_nodes);

Candidate evaluate(const GptConfig& m, const Machine& mc, const Layout& l, const MemoryOptions& o = {});

PlanResult plan_layouts(const GptConfig& m, const Machine& mc, const SearchOptions& o);

// The `tripod train` (= Megatron) flags that select layout `l`.
std::string megatron_flags(const GptConfig& m, const Layout& l);

}  // namespace tripod::plan
