// `tripod doctor` and `tripod plan` end to end through the real executable
// ($TRIPOD_BIN) on this machine, in a clean environment: doctor must pass
// or warn (never fail or crash) without a GPU, fail with a loopback
// MASTER_ADDR on two nodes; plan's JSON must put plain DP first for GPT-2
// 124M and model parallelism first for a 13B model.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

namespace {

struct CmdResult {
  int exit_code = -1;
  bool signalled = false;
  std::string out;
};

CmdResult run(const std::string& env, const std::string& args) {
  const char* bin = std::getenv("TRIPOD_BIN");
  const char* path = std::getenv("PATH");
  const std::string cmd = "env -i PATH='" + std::string(path ? path : "/usr/bin:/bin") + "' " + env + " " +
                          (bin ? bin : "tripod") + " " + args + " 2>&1";
  CmdResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int status = pclose(p);
  r.signalled = WIFSIGNALED(status);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(DoctorCli, CleanEnvironmentPassesOrWarns) {
  const CmdResult r = run("", "doctor --json --save /tmp --connect-timeout-ms 500");
  ASSERT_FALSE(r.signalled) << r.out;
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["summary"]["fail"].get<int>(), 0);
  std::map<std::string, std::string> status;
  for (const auto& c : j["checks"]) status[c["name"].get<std::string>()] = c["status"].get<std::string>();
  for (const char* name : {"host-ram", "shm", "save-dir", "master-addr", "master-port", "nccl-socket-ifname",
                           "nccl-ib", "nccl-debug", "gpus", "cuda-version", "nccl-version", "gpu-topology",
                           "all-reduce-busbw"})
    EXPECT_TRUE(status.count(name)) << name;
  EXPECT_NE(status["gpus"], "fail");
}

TEST(DoctorCli, TextOutputAndFailures) {
  const CmdResult ok = run("NCCL_DEBUG=INFO", "doctor --save /tmp");
  ASSERT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_NE(ok.out.find("[warn] nccl-debug"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("summary:"), std::string::npos);
  const CmdResult bad = run("MASTER_ADDR=localhost NNODES=2 NCCL_SOCKET_IFNAME=nosuchif9", "doctor --save /tmp");
  ASSERT_FALSE(bad.signalled);
  EXPECT_EQ(bad.exit_code, 1) << bad.out;
  EXPECT_NE(bad.out.find("[fail] master-addr"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("[fail] nccl-socket-ifname"), std::string::npos) << bad.out;
  EXPECT_NE(run("", "doctor --help").out.find("--model-params"), std::string::npos);
}

TEST(DoctorCli, UnderLauncherMeasuresAllReduce) {
  const CmdResult r = run("", "launch --nproc-per-node 2 doctor --bandwidth-sizes-mib 1 --bandwidth-iters 2 --save /tmp");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("[pass] all-reduce-busbw    2 ranks over Gloo (CPU): 1 MiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 0 of 2"), std::string::npos) << r.out;
}

TEST(PlanCli, Json) {
  CmdResult r = run("", "plan --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 "
                  "--global-batch-size 256 --bf16 --gpus-per-node 8 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["plain_dp_fits"].get<bool>());
  EXPECT_EQ(j["layouts"][0]["tensor_model_parallel_size"].get<int>(), 1);
  EXPECT_EQ(j["layouts"][0]["pipeline_model_parallel_size"].get<int>(), 1);
  EXPECT_EQ(j["layouts"][0]["data_parallel_size"].get<int>(), 8);

  // 13B under the distributed optimizer needs model parallelism (ZeRO-3
  // fits it on plain dp 8: PlanSearch.Model13bOn8x80NeedsModelParallel).
  r = run("", "plan --num-layers 40 --hidden-size 5120 --num-attention-heads 40 --seq-length 2048 "
              "--global-batch-size 512 --bf16 --gpus-per-node 8 --use-distributed-optimizer --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["plain_dp_fits"].get<bool>());
  for (const auto& l : j["layouts"]) {
    EXPECT_GT(l["tensor_model_parallel_size"].get<int>() * l["pipeline_model_parallel_size"].get<int>(), 1);
    EXPECT_LE(l["memory_gib"]["total"].get<double>(), 80.0);
  }
  // A table by default; nothing fits -> exit 1 with the reason.
  r = run("", "plan --num-layers 40 --hidden-size 5120 --num-attention-heads 40 --seq-length 2048 "
              "--global-batch-size 8 --gpus-per-node 1 --gpu-memory-gb 24");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("no layout fits"), std::string::npos) << r.out;
}

}  // namespace
