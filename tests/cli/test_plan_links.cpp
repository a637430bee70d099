// `tripod bench comm --links-out FILE` then `tripod plan --links FILE`, both
// through the real executable: the file holds the bus bandwidth the bench
// printed for its largest all_reduce, a group within one node sets the
// intra-node bandwidth and one across (simulated) nodes the inter-node one,
// and plan's communication time is the one it gives for the same bandwidth
// passed as a flag.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "comm/proc_util.h"

namespace {

using tripod::testing::free_port;
using tripod::testing::read_file;
using tripod::testing::run_shell;
using tripod::testing::temp_dir;
using tripod::testing::tripod_bin;

const std::string kBench = " bench comm --ops all_reduce --min-bytes 1024 --max-bytes 1048576 --iters 3";

// The busbw column of the last `op` row the bench printed.
double last_printed_busbw(const std::string& out, const std::string& want = "all_reduce") {
  std::istringstream in(out);
  std::string line;
  double busbw = -1;
  while (std::getline(in, line)) {
    const auto tag = line.find("] ");  // "[rank 0] " under tripod launch
    std::istringstream row(tag == std::string::npos ? line : line.substr(tag + 2));
    std::string bytes, count, op, us, algbw, bus;
    if (!(row >> bytes >> count >> op >> us >> algbw >> bus) || op != want) continue;
    busbw = std::stod(bus);
  }
  return busbw;
}

nlohmann::json plan_json(const std::string& extra) {
  const auto r = run_shell(tripod_bin() + " plan --num-layers 4 --hidden-size 256 --num-attention-heads 8 "
                                          "--seq-length 256 --global-batch-size 8 --gpus-per-node 2 --nnodes 2 "
                                          "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 "
                                          "--micro-batch-size 1 --op-times assumed --json " + extra,
                           120);
  EXPECT_EQ(r.code, 0) << r.output;
  const auto start = r.output.find('{');
  if (start == std::string::npos) {
    ADD_FAILURE() << r.output;
    return {};
  }
  return nlohmann::json::parse(r.output.substr(start));
}

TEST(PlanLinks, BenchCommWritesWhatItPrintedAndPlanUsesIt) {
  const std::string dir = temp_dir("planlinks");
  const std::string intra = dir + "/intra.json", inter = dir + "/inter.json";
  // One node of 2 ranks under tripod launch.
  auto r = run_shell(tripod_bin() + " launch --nproc-per-node 2" + kBench + " --links-out " + intra, 240);
  ASSERT_EQ(r.code, 0) << r.output;
  nlohmann::json j = nlohmann::json::parse(read_file(intra));
  EXPECT_EQ(j["group_size"], 2);
  EXPECT_FALSE(j["spans_nodes"].get<bool>());
  EXPECT_EQ(j["bytes"], 1048576);
  const double bw_intra = j["busbw_gbs"].get<double>();
  EXPECT_GT(bw_intra, 0);
  EXPECT_NEAR(bw_intra, last_printed_busbw(r.output), 1e-4 + 1e-3 * bw_intra) << r.output;

  // Two "nodes" of one rank each, launched by hand (LOCAL_WORLD_SIZE 1).
  const int port = free_port();
  std::string cmd;
  for (int k = 0; k < 2; ++k)
    cmd += "(RANK=" + std::to_string(k) + " LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "
           "MASTER_PORT=" + std::to_string(port) + " exec " + tripod_bin() + kBench + " --links-out " + inter +
           " > " + dir + "/r" + std::to_string(k) + ".log 2>&1) & p" + std::to_string(k) + "=$!; ";
  cmd += "wait $p0; a=$?; wait $p1; exit $((a + $?))";
  r = run_shell(cmd, 240);
  ASSERT_EQ(r.code, 0) << read_file(dir + "/r0.log") << read_file(dir + "/r1.log");
  j = nlohmann::json::parse(read_file(inter));
  EXPECT_TRUE(j["spans_nodes"].get<bool>());
  const double bw_inter = j["busbw_gbs"].get<double>();
  EXPECT_NEAR(bw_inter, last_printed_busbw(read_file(dir + "/r0.log")), 1e-4 + 1e-3 * bw_inter);

  // plan: the measured bandwidths replace the flags, and the note says so.
  const nlohmann::json measured = plan_json("--links " + intra + " " + inter);
  ASSERT_TRUE(measured.contains("layouts") && !measured["layouts"].empty()) << measured.dump();
  EXPECT_DOUBLE_EQ(measured["machine"]["intra_node_bandwidth_gbs"].get<double>(), bw_intra);
  EXPECT_DOUBLE_EQ(measured["machine"]["inter_node_bandwidth_gbs"].get<double>(), bw_inter);
  const std::string notes = measured["notes"].dump();
  EXPECT_NE(notes.find("intra-node measured (" + intra), std::string::npos) << notes;
  EXPECT_NE(notes.find("inter-node measured (" + inter), std::string::npos) << notes;
  // The same bandwidths as flags give the same TP time (an independent path).
  const nlohmann::json flags = plan_json("--intra-node-bandwidth-gbs " + std::to_string(bw_intra) +
                                         " --inter-node-bandwidth-gbs " + std::to_string(bw_inter));
  ASSERT_TRUE(flags.contains("layouts") && !flags["layouts"].empty()) << flags.dump();
  const double tp_measured = measured["layouts"][0]["time_s"]["tp_comm"].get<double>();
  EXPECT_GT(tp_measured, 0);
  EXPECT_NEAR(tp_measured, flags["layouts"][0]["time_s"]["tp_comm"].get<double>(), 1e-5 * tp_measured);
  EXPECT_NE(flags["notes"].dump().find("intra-node assumed"), std::string::npos) << flags["notes"].dump();
}

// `--ops all_reduce,all_to_all`: the file also holds the largest
// all_to_all's bus bandwidth (the data check passed, or the bench stops),
// and plan times the MoE token exchange with it. By hand, 2 MoE layers,
// ep 2 of dp 2, micro-batch 1 of seq 256, top-2, C 256, bf16, global batch
// 8 (4 micro-batches): 4 x 2 layers x 4 exchanges x (1/2 x 256 x 2 x 256 x
// 2 B / bw + 10 us).
TEST(PlanLinks, AllToAllBandwidthTimesTheMoeExchange) {
  const std::string dir = temp_dir("planlinks_a2a");
  const std::string file = dir + "/a2a.json";
  auto r = run_shell(tripod_bin() + " launch --nproc-per-node 2 bench comm --ops all_reduce,all_to_all "
                                    "--min-bytes 1024 --max-bytes 1048576 --iters 3 --links-out " + file,
                     240);
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(read_file(file));
  ASSERT_TRUE(j.contains("all_to_all")) << j.dump();
  EXPECT_EQ(j["all_to_all"]["bytes"], 1048576);
  const double bw = j["all_to_all"]["busbw_gbs"].get<double>();
  EXPECT_GT(bw, 0);
  EXPECT_NEAR(bw, last_printed_busbw(r.output, "all_to_all"), 1e-4 + 1e-3 * bw) << r.output;
  const auto p = run_shell(tripod_bin() + " plan --num-layers 2 --hidden-size 256 --num-attention-heads 8 "
                                          "--seq-length 256 --num-experts 4 --moe-router-topk 2 --global-batch-size 8 "
                                          "--micro-batch-size 1 --gpus-per-node 2 --tensor-model-parallel-size 1 "
                                          "--pipeline-model-parallel-size 1 --expert-model-parallel-size 2 --bf16 "
                                          "--op-times assumed --json --links " + file,
                           120);
  ASSERT_EQ(p.code, 0) << p.output;
  const nlohmann::json plan = nlohmann::json::parse(p.output.substr(p.output.find('{')));
  ASSERT_FALSE(plan["layouts"].empty()) << p.output;
  EXPECT_EQ(plan["layouts"][0]["expert_model_parallel_size"], 2);
  const double want = 4 * 2 * 4 * (0.5 * 256 * 2 * 256 * 2 / (bw * 1e9) + 10e-6);
  EXPECT_NEAR(plan["layouts"][0]["time_s"]["ep_comm"].get<double>(), want, 1e-9 * want) << p.output;
  EXPECT_NE(plan["notes"].dump().find("all_to_all"), std::string::npos) << plan["notes"].dump();
}

TEST(PlanLinks, BadFilesAreNamed) {
  const std::string dir = temp_dir("planlinks_bad");
  const std::string bad = dir + "/bad.json";
  std::ofstream(bad) << "{\"format\": 1, \"what\": \"something else\"}";
  for (const std::string& f : {bad, dir + "/missing.json"}) {
    const auto r = run_shell(tripod_bin() + " plan --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                                            "--seq-length 64 --global-batch-size 8 --links " + f,
                             60);
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("--links " + f), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("bench comm --links-out"), std::string::npos) << r.output;
  }
}

}  // namespace
