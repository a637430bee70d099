// --data-parallel-sharding-strategy, --use-megatron-fsdp and
// --num-distributed-optimizer-instances through the real
// executable ($TRIPOD_BIN): --help lists them, contradictions and unknown
// values fail before any compute with an error naming the flags and the
// fix, and the start-up log names the strategy in effect for each way of
// asking for it (docs/zero.md: how the flags combine).
#include <gtest/gtest.h>

#include <string>

#include "testing/run_tripod.h"

namespace {

using tripod::testing::run_tripod;
using Result = tripod::testing::TripodRun;

const std::string kModel =
    "train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data --vocab-size 64 "
    "--micro-batch-size 2 --train-iters 1 --eval-interval 0 ";

TEST(ShardingFlags, HelpListsThem) {
  const Result r = run_tripod("train --help");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* f : {"--data-parallel-sharding-strategy", "--use-megatron-fsdp", "--num-distributed-optimizer-instances"})
    EXPECT_NE(r.output.find(f), std::string::npos) << f << " missing from --help";
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
           // Hybrid sharding shards within instances: it needs a strategy that shards, and N | dp x cp.
           Case{"--num-distributed-optimizer-instances 2", "--num-distributed-optimizer-instances 2 needs the distributed "
                "optimizer", "add --use-distributed-optimizer"},
           Case{"--use-megatron-fsdp --num-distributed-optimizer-instances 2",
                "--num-distributed-optimizer-instances 2 does not divide data-parallel x context-parallel size 1",
                "divides the data-parallel size"},
       }) {
    const Result r = run_tripod(kModel + c.flags);
    EXPECT_NE(r.code, 0) << c.flags;
    EXPECT_NE(r.output.find(c.error), std::string::npos) << c.flags << "\n" << r.output;
    EXPECT_NE(r.output.find(c.hint), std::string::npos) << c.flags << "\n" << r.output;
    EXPECT_EQ(r.output.find("iteration "), std::string::npos) << "trained before failing: " << c.flags;
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
    const Result r = run_tripod(kModel + c.flags);
    ASSERT_EQ(r.code, 0) << c.flags << "\n" << r.output;
    const size_t layout = r.output.find("layout: ");
    ASSERT_NE(layout, std::string::npos) << r.output;
    const std::string line = r.output.substr(layout, r.output.find('\n', layout) - layout);
    if (*c.log)
      EXPECT_NE(line.find(c.log), std::string::npos) << c.flags << "\n" << line;
    else
      EXPECT_TRUE(line.find("sharding") == std::string::npos && line.find("distributed optimizer") == std::string::npos)
          << c.flags << "\n" << line;
  }
}

}  // namespace
