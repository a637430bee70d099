// `tripod bench cp` through the real executable ($TRIPOD_BIN): every
// --cp-comm-type runs at cp 2 and cp 4; the ring timed overlapped and
// serialized gives the same out and dqkv on every rank; the TFLOP/s column
// is the hand count of the attention's FLOPs over the time; bad shapes are
// refused naming the flags.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>
#include <string>

#include "testing/run_tripod.h"

namespace {

using tripod::testing::run_tripod;

struct Row {
  double ms = 0, tflops = -1;
};

// The table's rows by name ("p2p", "p2p serialized", ...): after the
// launcher's "[rank 0] " prefix, two spaces, the name in 18 columns, then
// the time and the TFLOP/s ("-" for the passes alone).
std::map<std::string, Row> rows(const std::string& out) {
  std::map<std::string, Row> got;
  std::istringstream in(out);
  const std::string prefix = "[rank 0]   ";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) != 0 || line.size() < prefix.size() + 18) continue;
    std::string name = line.substr(prefix.size(), 18);
    name.erase(name.find_last_not_of(' ') + 1);
    std::istringstream f(line.substr(prefix.size() + 18));
    Row r;
    std::string tf;
    if (!(f >> r.ms >> tf)) continue;
    r.tflops = tf == "-" ? -1 : std::stod(tf);
    got[name] = r;
  }
  return got;
}

void check(int cp, int64_t T, int64_t B, int NH, int G, int HS) {
  const std::string args = "launch --nproc-per-node " + std::to_string(cp) + " -- bench cp --seq-length " +
                           std::to_string(T) + " --micro-batch-size " + std::to_string(B) +
                           " --num-attention-heads " + std::to_string(NH) + " --num-query-groups " +
                           std::to_string(G) + " --kv-channels " + std::to_string(HS) + " --iters 2 --warmup-iters 1";
  auto r = run_tripod(args);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto got = rows(r.output);
  for (const char* n : {"p2p", "p2p serialized", "p2p compute only", "p2p passes only", "a2a", "all_gather"}) {
    ASSERT_TRUE(got.count(n)) << n << "\n" << r.output;
    EXPECT_GT(got.at(n).ms, 0) << n;
  }
  EXPECT_EQ(got.at("p2p passes only").tflops, -1);
  // Causal attention forward 2 B NH HS T^2, backward 2.5x, over cp ranks.
  const double flops = 3.5 * 2.0 * double(B * NH * HS) * double(T) * double(T) / cp;
  for (const char* n : {"p2p", "a2a", "all_gather"}) {
    const double want = flops / (got.at(n).ms * 1e-3) / 1e12;
    EXPECT_NEAR(got.at(n).tflops, want, 2e-3 * want + 1e-9) << n << "\n" << r.output;
  }
  EXPECT_NE(r.output.find("overlapped and serialized give the same out and dqkv: yes"), std::string::npos)
      << r.output;
}

TEST(BenchCp, EveryExchangeAtCp2) { check(2, 256, 2, 4, 2, 16); }
TEST(BenchCp, EveryExchangeAtCp4WithGqa) { check(4, 256, 1, 8, 4, 8); }

TEST(BenchCp, RefusesShapesTheExchangesCannotSplit) {
  auto heads = run_tripod("launch --nproc-per-node 2 -- bench cp --seq-length 64 --num-attention-heads 3 "
                          "--num-query-groups 3 --kv-channels 8 --cp-comm-type a2a --iters 1");
  EXPECT_NE(heads.code, 0);
  EXPECT_NE(heads.output.find("--cp-comm-type a2a splits the heads over the 2 cp ranks"), std::string::npos)
      << heads.output;
  auto seq = run_tripod("launch --nproc-per-node 2 -- bench cp --seq-length 66 --num-attention-heads 2 "
                        "--num-query-groups 2 --kv-channels 8 --iters 1");
  EXPECT_NE(seq.code, 0);
  EXPECT_NE(seq.output.find("--seq-length"), std::string::npos) << seq.output;
}

}  // namespace
