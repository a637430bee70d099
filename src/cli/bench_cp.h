// `tripod bench cp`: the attention core of one layer under context
// parallelism, forward + backward, on random inputs, per --cp-comm-type:
// p2p (the ring) with its K/V passes overlapped with the block attention
// and serialized (each pass waited for before the block), the ring's block
// attention alone and its passes alone, a2a and all_gather. It answers how
// much of the ring's communication the attention hides on this machine,
// and which exchange suits a shape (docs/parallelism.md, "Context
// parallelism"). Run it under a launcher with one rank per cp rank.
//
// Relates to: model/context_parallel.h (RingAttention::set_overlap,
// UlyssesAttention, AllGatherAttention), cli/bench.cpp.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace tripod::cli {

struct CpBenchArgs {
  int64_t seq_length = 8192;  // the whole sequence; each rank holds seq_length / cp
  int64_t micro_batch_size = 1;
  int num_attention_heads = 32;
  int num_query_groups = 8;
  int kv_channels = 128;  // head size
  std::string comm_types = "p2p,a2a,all_gather";
  std::string device = "cpu";
  std::string backend;  // --distributed-backend
  std::string dtype;    // "" = bf16 on cuda, fp32 on cpu
  int iters = 5, warmup = 2;
  double timeout_minutes = 10;
};

void add_cp_bench_options(CLI::App& sub, CpBenchArgs& a);
int run_cp_bench(const CpBenchArgs& a);

}  // namespace tripod::cli
