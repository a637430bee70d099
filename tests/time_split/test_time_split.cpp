// The iteration time split (compute / tp comm / pp wait / dp comm /
// optimizer / data) of `tripod train`, read back from --metrics-file:
//  - a single process has no communication: tp, pp and dp read exactly 0;
//  - every part is non-negative and the parts add up to elapsed_ms;
//  - a sleep injected into every micro-batch load (a testing env var)
//    shows up as data time of (micro-batches x sleep), to the millisecond;
//  - through `tripod launch` with 2 ranks, the kind of communication the
//    layout has (dp all-reduce, tp collectives, pp p2p) is > 0 and the
//    kinds it lacks are exactly 0.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const char* kModel =
    "train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64 --mock-data "
    "--micro-batch-size 2 --global-batch-size 8 --train-iters 6 --log-interval 2 --lr 1e-3 --eval-interval 0 ";

const char* kKeys[] = {"time_compute_ms", "time_tp_comm_ms", "time_pp_wait_ms",
                       "time_dp_comm_ms", "time_optimizer_ms", "time_data_ms"};

using Record = std::map<std::string, double>;

struct TrainRun {
  int code = -1;
  std::string output;
  std::vector<Record> records;  // training records of the metrics file
};

// Reads `"key":number` pairs of each JSONL line (the records are flat).
std::vector<Record> read_records(const fs::path& path) {
  std::vector<Record> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.find("\"elapsed_ms\"") == std::string::npos) continue;  // not a training record
    Record r;
    for (size_t p = line.find('"'); p != std::string::npos; p = line.find('"', p)) {
      const size_t e = line.find('"', p + 1);
      const std::string key = line.substr(p + 1, e - p - 1);
      if (e + 1 < line.size() && line[e + 1] == ':') {
        char* end = nullptr;
        const double v = std::strtod(line.c_str() + e + 2, &end);
        if (end != line.c_str() + e + 2) r[key] = v;
      }
      p = line.find_first_of(",}", e + 1);
      if (p == std::string::npos) break;
    }
    out.push_back(r);
  }
  return out;
}

// Runs `[ENV] tripod [LAUNCHER] FLAGS --metrics-file ...`.
TrainRun train(const std::string& name, const std::string& env, const std::string& launcher,
               const std::string& flags) {
  const char* bin = std::getenv("TRIPOD_BIN");
  const fs::path dir = fs::temp_directory_path() / ("tripod_time_split_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path metrics = dir / "m.jsonl";
  const std::string cmd = env + std::string(bin ? bin : "tripod") + " " + launcher + flags + " --metrics-file " +
                          metrics.string() + " 2>&1";
  TrainRun r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  while (fgets(buf.data(), buf.size(), p)) r.output += buf.data();
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.records = read_records(metrics);
  fs::remove_all(dir);
  return r;
}

const char* kLaunch2 = "launch --nproc-per-node 2 ";

// Every record: all six keys, non-negative, adding up to elapsed_ms.
void expect_consistent(const TrainRun& r) {
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_EQ(r.records.size(), 3u) << r.output;  // 6 iterations, logged every 2
  for (const auto& rec : r.records) {
    double sum = 0;
    for (const char* k : kKeys) {
      ASSERT_TRUE(rec.count(k)) << "missing key " << k;
      EXPECT_GE(rec.at(k), 0.0) << k;
      sum += rec.at(k);
    }
    const double elapsed = rec.at("elapsed_ms");
    EXPECT_NEAR(sum, elapsed, std::max(1.0, 0.02 * elapsed)) << "iteration " << rec.at("iteration");
    EXPECT_GT(rec.at("time_compute_ms"), 0.0);
    EXPECT_GT(rec.at("time_optimizer_ms"), 0.0);
  }
}

TEST(TimeSplit, SingleProcessHasNoCommunication) {
  TrainRun r = train("single", "", "", kModel);
  expect_consistent(r);
  EXPECT_NE(r.output.find("time split (ms): compute "), std::string::npos) << r.output;
  for (const auto& rec : r.records) {
    EXPECT_EQ(rec.at("time_tp_comm_ms"), 0.0);
    EXPECT_EQ(rec.at("time_pp_wait_ms"), 0.0);
    EXPECT_EQ(rec.at("time_dp_comm_ms"), 0.0);
  }
}

// 4 micro-batches per iteration (global 8 / micro 2), 100 ms asleep in each
// load: 400 ms of data time per iteration, plus the (sub-millisecond) copy;
// counting it nowhere (0) or twice (800) would fail. The upper bound leaves
// 300 ms for late wake-ups: four 25 ms sleeps once came back 93 ms late in
// all on a 2-core machine at load 4-6, so the sleeps are long enough that
// lateness cannot reach the doubled count.
TEST(TimeSplit, SingleProcessInjectedDataWait) {
  TrainRun r = train("sleep", "TRIPOD_TESTING_DATA_SLEEP_MS=100 ", "", kModel);
  expect_consistent(r);
  for (const auto& rec : r.records) {
    EXPECT_GE(rec.at("time_data_ms"), 400.0);
    EXPECT_LT(rec.at("time_data_ms"), 400.0 + 300.0);  // slack for late wake-ups on a loaded box
  }
}

TEST(TimeSplit, LaunchDataParallel) {
  TrainRun r = train("dp2", "", kLaunch2, std::string(kModel));
  expect_consistent(r);
  for (const auto& rec : r.records) {
    EXPECT_GT(rec.at("time_dp_comm_ms"), 0.0);
    EXPECT_EQ(rec.at("time_tp_comm_ms"), 0.0);
    EXPECT_EQ(rec.at("time_pp_wait_ms"), 0.0);
  }
}

// The bucketed, overlapped path: the exposed waits (and the launches) count.
TEST(TimeSplit, LaunchDataParallelOverlapDistributedOptimizer) {
  TrainRun r = train("dp2_overlap", "", kLaunch2,
                std::string(kModel) + "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather "
                                      "--ddp-bucket-size 3000");
  expect_consistent(r);
  for (const auto& rec : r.records) {
    EXPECT_GT(rec.at("time_dp_comm_ms"), 0.0);
    EXPECT_EQ(rec.at("time_tp_comm_ms"), 0.0);
    EXPECT_EQ(rec.at("time_pp_wait_ms"), 0.0);
  }
}

TEST(TimeSplit, LaunchTensorParallel) {
  TrainRun r = train("tp2", "", kLaunch2, std::string(kModel) + "--tensor-model-parallel-size 2 --sequence-parallel");
  expect_consistent(r);
  for (const auto& rec : r.records) {
    EXPECT_GT(rec.at("time_tp_comm_ms"), 0.0);
    EXPECT_EQ(rec.at("time_dp_comm_ms"), 0.0);
    EXPECT_EQ(rec.at("time_pp_wait_ms"), 0.0);
  }
}

TEST(TimeSplit, LaunchPipelineParallel) {
  TrainRun r = train("pp2", "", kLaunch2, std::string(kModel) + "--pipeline-model-parallel-size 2");
  expect_consistent(r);
  for (const auto& rec : r.records) {
    EXPECT_GT(rec.at("time_pp_wait_ms"), 0.0);
    EXPECT_EQ(rec.at("time_dp_comm_ms"), 0.0);
  }
}

}  // namespace
