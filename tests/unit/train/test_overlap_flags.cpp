// The bucket/overlap flags of `tripod train` through the real executable
// ($TRIPOD_BIN): --help lists them, bad combinations fail before any
// compute with an error naming the flag and the fix, and the start-up log
// reports the buckets (count, sizes in launch order) and the overlap state.
#include <gtest/gtest.h>

#include <string>

#include "testing/run_tripod.h"

namespace {

using tripod::testing::run_tripod;
using Result = tripod::testing::TripodRun;

const std::string kModel =
    "train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data --vocab-size 64 "
    "--micro-batch-size 2 --train-iters 1 --eval-interval 0 ";

TEST(OverlapFlags, HelpListsThem) {
  const Result r = run_tripod("train --help");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* f : {"--ddp-bucket-size", "--overlap-grad-reduce", "--overlap-param-gather"})
    EXPECT_NE(r.output.find(f), std::string::npos) << f << " missing from --help";
}

TEST(OverlapFlags, BadCombinationsNameTheFlagAndTheFix) {
  struct Case {
    const char* flags;
    const char* error;
    const char* hint;
  };
  for (const Case& c : {
           Case{"--overlap-param-gather --overlap-grad-reduce",
                "--overlap-param-gather needs --use-distributed-optimizer", "add --use-distributed-optimizer"},
           Case{"--overlap-param-gather --use-distributed-optimizer",
                "--overlap-param-gather needs --overlap-grad-reduce", "add --overlap-grad-reduce"},
           Case{"--ddp-bucket-size -3", "--ddp-bucket-size is -3", "N >= 1"},
       }) {
    const Result r = run_tripod(kModel + c.flags);
    EXPECT_NE(r.code, 0) << c.flags;
    EXPECT_NE(r.output.find(c.error), std::string::npos) << c.flags << "\n" << r.output;
    EXPECT_NE(r.output.find(c.hint), std::string::npos) << c.flags << "\n" << r.output;
    EXPECT_EQ(r.output.find("iteration "), std::string::npos) << "trained before failing: " << c.flags;
  }
}

TEST(OverlapFlags, StartupLogReportsBuckets) {
  // One process: dp 1 has nothing to overlap, so one bucket and overlap off
  // even when asked; the log says which.
  Result r = run_tripod(kModel + "--overlap-grad-reduce --ddp-bucket-size 1000");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("chunk 0: 1 bucket ["), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("overlap grad reduce off"), std::string::npos) << r.output;
  // Two ranks, hand count: a layer of hidden 32 is 12704 elements (LN 64,
  // qkv 3072 + 96, proj 1024 + 32, LN 64, fc1 4096 + 128, fc2 4096 + 32);
  // the word embedding 128 (padded vocab) x 32 = 4096, positions 16 x 32 =
  // 512, final norm 64. Walking back with a 10000 limit: final norm + layer
  // 1 from fc2 down to proj = 9536, + qkv bias 9632, + qkv weight = 12704
  // closes bucket 0; layer 1's LN1 (64) + layer 0 down to its qkv weight =
  // 12704 closes bucket 1; layer 0's LN1 + positions + words = 4672.
  r = run_tripod("launch --nproc-per-node 2 " + kModel + "--global-batch-size 4 --overlap-grad-reduce --ddp-bucket-size 10000");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("chunk 0: 3 buckets [12704 12704 4672]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("overlap grad reduce on, overlap param gather off"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bucket size 10000"), std::string::npos) << r.output;
}

}  // namespace
