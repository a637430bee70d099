// --data-parallel-sharding-strategy and --use-megatron-fsdp through the real
// executable ($TRIPOD_BIN): --help lists them, contradictions and unknown
// values fail before any compute with an error naming the flags and the
// fix, and the start-up log names the strategy in effect for each way of
// asking for it (docs/zero.md: how the flags combine).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/wait.h>

namespace {

struct Result {
  int status = -1;
  std::string out;
};

Result tripod(const std::string& args) {
  const char* bin = std::getenv("TRIPOD_BIN");
  Result r;
  if (!bin) return r;
  FILE* p = popen((std::string(bin) + " " + args + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int s = pclose(p);
  r.status = WIFEXITED(s) ? WEXITSTATUS(s) : -1;
  return r;
}

const std::string kModel =
    "train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data --vocab-size 64 "
    "--micro-batch-size 2 --train-iters 1 --eval-interval 0 ";

TEST(ShardingFlags, HelpListsThem) {
  const Result r = tripod("train --help");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* f : {"--data-parallel-sharding-strategy", "--use-megatron-fsdp"})
    EXPECT_NE(r.out.find(f), std::string::npos) << f << " missing from --help";
}

TEST(ShardingFlags, ContradictionsNameTheFlagsAndTheFix) {
  struct Case {
    const char* flags;
    const char* error;
    const char* hint;
  };
  for (const Case& c : {
           Case{"--use-distributed-optimizer --data-parallel-sharding-strategy no_shard",
                "contradicts --data-parallel-sharding-strategy no_shard", "drop --use-distributed-optimizer"},
           Case{"--use-megatron-fsdp --use-distributed-optimizer --data-parallel-sharding-strategy no_shard",
                "contradicts --data-parallel-sharding-strategy no_shard", "drop --use-distributed-optimizer"},
           Case{"--data-parallel-sharding-strategy zero3", "--data-parallel-sharding-strategy zero3 is not one of",
                "optim_grads_params (ZeRO-3)"},
       }) {
    const Result r = tripod(kModel + c.flags);
    EXPECT_NE(r.status, 0) << c.flags;
    EXPECT_NE(r.out.find(c.error), std::string::npos) << c.flags << "\n" << r.out;
    EXPECT_NE(r.out.find(c.hint), std::string::npos) << c.flags << "\n" << r.out;
    EXPECT_EQ(r.out.find("iteration "), std::string::npos) << "trained before failing: " << c.flags;
  }
}

TEST(ShardingFlags, StartupLogNamesTheStrategy) {
  struct Case {
    const char* flags;
    const char* log;  // "" : no sharding note
  };
  for (const Case& c : {
           Case{"", ""},
           Case{"--data-parallel-sharding-strategy no_shard", ""},
           Case{"--use-distributed-optimizer", ", distributed optimizer"},
           Case{"--data-parallel-sharding-strategy optim", ", distributed optimizer"},
           Case{"--data-parallel-sharding-strategy optim_grads", "sharding optim_grads (ZeRO-2"},
           Case{"--use-distributed-optimizer --data-parallel-sharding-strategy optim_grads",
                "sharding optim_grads (ZeRO-2"},
           Case{"--use-megatron-fsdp", "sharding optim_grads_params (ZeRO-3"},
           Case{"--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads", "sharding optim_grads (ZeRO-2"},
           Case{"--data-parallel-sharding-strategy optim_grads_params", "sharding optim_grads_params (ZeRO-3"},
       }) {
    const Result r = tripod(kModel + c.flags);
    ASSERT_EQ(r.status, 0) << c.flags << "\n" << r.out;
    const size_t layout = r.out.find("layout: ");
    ASSERT_NE(layout, std::string::npos) << r.out;
    const std::string line = r.out.substr(layout, r.out.find('\n', layout) - layout);
    if (*c.log)
      EXPECT_NE(line.find(c.log), std::string::npos) << c.flags << "\n" << line;
    else
      EXPECT_TRUE(line.find("sharding") == std::string::npos && line.find("distributed optimizer") == std::string::npos)
          << c.flags << "\n" << line;
  }
}

}  // namespace
