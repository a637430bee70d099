// docs/megatron-flags.md against `tripod train`: every flag in the page's
// tables parses as its row says (implemented, tripod only: accepted
// silently; accepted: parses and logs its note; planned and rejected: stop
// with their note, every such flag of one command line in one error), plus
// the derived flags' arithmetic and the closest-name hint for unknown flags.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "testing/run_tripod.h"

namespace {

using tripod::testing::run_tripod;

struct Row {
  std::string flag, takes, answer, note;
};

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// Cells split at '|' but not at an escaped '\|' (kept as '|').
std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  for (size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cell += '|';
      ++i;
    } else if (line[i] == '|') {
      cells.push_back(trim(cell));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  return cells;
}

std::vector<Row> doc_rows() {
  const char* src = std::getenv("TRIPOD_SOURCE_DIR");
  std::ifstream f(std::string(src ? src : ".") + "/docs/megatron-flags.md");
  std::vector<Row> rows;
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("| `--", 0) != 0) continue;
    const auto cells = cells_of(line);
    if (cells.size() < 4) continue;
    rows.push_back(Row{cells[0].substr(1, cells[0].size() - 2), cells[1], cells[2], cells[3]});
  }
  return rows;
}

std::string with_value(const Row& r) {
  // Flags whose value is a name, not a number.
  if (r.flag == "--position-embedding-type") return r.flag + " rope";
  if (r.flag == "--normalization") return r.flag + " RMSNorm";
  if (r.flag == "--config") return r.flag + " /dev/null";  // a flag file (empty)
  if (r.flag == "--fp8-format") return r.flag + " hybrid";
  if (r.flag == "--fp8-recipe") return r.flag + " tensorwise";
  if (r.flag == "--fp8-amax-compute-algo") return r.flag + " max";
  if (r.flag == "--fp8-param-gather") return r.flag + " --fp8-format hybrid --use-distributed-optimizer";  // what it needs
  if (r.flag == "--fp8-dot-product-attention" || r.flag == "--no-fp8-wgrad") return r.flag + " --fp8-format hybrid";  // what it needs
  if (r.flag == "--data-parallel-sharding-strategy") return r.flag + " optim_grads";
  if (r.flag == "--megatron-fsdp-grad-comm-dtype" || r.flag == "--megatron-fsdp-main-grads-dtype") return r.flag + " bf16";
  if (r.flag == "--megatron-fsdp-main-params-dtype") return r.flag + " fp32";
  if (r.flag == "--outer-dp-sharding-strategy") return r.flag + " no_shard";
  if (r.takes == "value") return r.flag + " 1";
  if (r.takes == "list") return r.flag + " 1 1";
  return r.flag;
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

}  // namespace

TEST(MegatronFlags, EveryDocumentedFlagParsesAsTheTableSays) {
  const auto rows = doc_rows();
  ASSERT_GT(rows.size(), 800u) << "docs/megatron-flags.md tables not found";
  std::vector<Row> accepted, stopping;
  int implemented = 0;
  for (const auto& r : rows) {
    ASSERT_TRUE(r.takes == "value" || r.takes == "list" || r.takes == "—") << r.flag << ": " << r.takes;
    if (r.answer == "implemented" || r.answer == "tripod only") {
      // One run each: their values may not combine (--help exits, --bf16 with --fp16).
      ++implemented;
      const auto run = run_tripod("train --parse-only --train-iters 10 " + with_value(r));
      EXPECT_EQ(run.code, 0) << r.flag << ": " << run.output;
      EXPECT_FALSE(contains(run.output, "accepted and ignored")) << r.flag << ": " << run.output;
    } else if (r.answer == "accepted") {
      accepted.push_back(r);
    } else {
      ASSERT_TRUE(r.answer == "planned" || r.answer == "rejected") << r.flag << ": " << r.answer;
      stopping.push_back(r);
    }
  }
  // All accepted flags on one command line: it parses and logs each note.
  std::string line = "train --parse-only --train-iters 10";
  for (const auto& r : accepted) line += " " + with_value(r);
  auto run = run_tripod(line);
  EXPECT_EQ(run.code, 0) << run.output;
  for (const auto& r : accepted)
    EXPECT_TRUE(contains(run.output, r.flag + ": accepted and ignored: " + r.note)) << r.flag << ": " << run.output;
  // All planned and rejected flags on one command line: one error names every one.
  line = "train --parse-only --train-iters 10";
  for (const auto& r : stopping) line += " " + with_value(r);
  run = run_tripod(line);
  EXPECT_NE(run.code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, std::to_string(stopping.size()) + " Megatron-LM flags that tripod does not take:"))
      << run.output;
  for (const auto& r : stopping) {
    const std::string says = r.answer == "planned" ? " is a Megatron-LM flag that tripod does not take yet: "
                                                   : " is a Megatron-LM flag that tripod does not take: ";
    EXPECT_TRUE(contains(run.output, r.flag + says + r.note)) << r.flag << ": " << run.output;
  }
  EXPECT_GT(implemented, 50);
  EXPECT_GT(accepted.size(), 100u);
  EXPECT_GT(stopping.size(), 500u);
}

TEST(MegatronFlags, OneStoppingFlagNamesItsAnswer) {
  auto run = run_tripod("train --parse-only --train-iters 10 --rotary-interleaved");
  EXPECT_NE(run.code, 0);
  EXPECT_TRUE(contains(run.output, "error: --rotary-interleaved is a Megatron-LM flag that tripod does not take: "
                                   "not implemented: the model options are GPT-2 and the Llama family"))
      << run.output;
  // The flags the first Megatron job scripts with FP8 and experts brought: Megatron-LM's,
  // planned, not "unknown" (--num-experts itself is implemented now: docs/moe.md).
  run = run_tripod("train --parse-only --train-iters 10 --fp8-output-proj --num-experts 8 --moe-router-group-topk 2");
  EXPECT_NE(run.code, 0);
  EXPECT_FALSE(contains(run.output, "not a Megatron-LM flag")) << run.output;
  EXPECT_TRUE(contains(run.output, "--fp8-output-proj is a Megatron-LM flag that tripod does not take yet: planned: FP8"))
      << run.output;
  EXPECT_TRUE(contains(run.output, "--moe-router-group-topk is a Megatron-LM flag that tripod does not take yet: "
                                   "planned: tripod's MoE layers")) << run.output;
  EXPECT_FALSE(contains(run.output, "--num-experts is")) << run.output;
}

TEST(MegatronFlags, IssueFlagsAreAnswered) {
  // The flags a Megatron job script brought in first.
  for (const char* f : {"--distributed-backend nccl", "--num-workers 2", "--data-impl mmap", "--use-flash-attn",
                        "--log-throughput", "--DDP-impl local", "--lr-warmup-fraction 0.01", "--exit-interval 5",
                        "--exit-duration-in-mins 230"}) {
    const auto run = run_tripod(std::string("train --parse-only --train-iters 10 ") + f);
    EXPECT_EQ(run.code, 0) << f << ": " << run.output;
  }
}

TEST(MegatronFlags, WarmupFractionOfTheDecayIterations) {
  auto run = run_tripod("train --parse-only --train-iters 1000 --lr-warmup-fraction 0.01");
  EXPECT_TRUE(contains(run.output, "lr warmup 10 iterations")) << run.output;
  run = run_tripod("train --parse-only --train-iters 1000 --lr-decay-iters 500 --lr-warmup-fraction 0.1");
  EXPECT_TRUE(contains(run.output, "lr warmup 50 iterations")) << run.output;
  run = run_tripod("train --parse-only --train-iters 1000 --lr-warmup-iters 5 --lr-warmup-fraction 0.1");
  EXPECT_NE(run.code, 0);
  EXPECT_TRUE(contains(run.output, "--lr-warmup-fraction and --lr-warmup-iters are both given")) << run.output;
}

TEST(MegatronFlags, RepeatedFlagTakesTheLastValueAndConfigFilesExpandInPlace) {
  // As argparse: a launch script can override a value set earlier on the line.
  auto run = run_tripod("train --parse-only --train-iters 10 --lr-warmup-iters 5 --lr-warmup-iters 7");
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "lr warmup 7 iterations")) << run.output;
  const std::string file = ::testing::TempDir() + "/tripod_flags_" + std::to_string(::getpid()) + ".txt";
  std::ofstream(file) << "--train-iters 1000\n--lr-warmup-fraction 0.01\n";
  run = run_tripod("train --parse-only --config " + file);
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "lr warmup 10 iterations")) << run.output;
  run = run_tripod("train --parse-only --config " + file + " --train-iters 500");  // later flags override
  EXPECT_TRUE(contains(run.output, "lr warmup 5 iterations")) << run.output;
  std::remove(file.c_str());
}

TEST(MegatronFlags, UnknownFlagSuggestsTheClosestNames) {
  auto run = run_tripod("train --parse-only --train-iters 10 --lr-warmup-fractoin 0.1");
  EXPECT_NE(run.code, 0);
  EXPECT_TRUE(contains(run.output, "unknown flag(s) --lr-warmup-fractoin")) << run.output;
  EXPECT_TRUE(contains(run.output, "did you mean --lr-warmup-fraction")) << run.output;
  run = run_tripod("train --parse-only --train-iters 10 --tensor-parallel-size 2");
  EXPECT_TRUE(contains(run.output, "--tensor-model-parallel-size")) << run.output;
}

TEST(TrainDefaults, DeviceIsChosenAndLogged) {
  // No --device: cuda when this build has CUDA and a GPU is visible, else cpu,
  // and the start-up log says which and why.
  auto run = run_tripod("train --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 "
                        "--mock-data --vocab-size 64 --micro-batch-size 2 --train-iters 1 --eval-interval 100");
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "device: cpu (") || contains(run.output, "device: cuda (")) << run.output;
  EXPECT_TRUE(contains(run.output, "; --device overrides)")) << run.output;
  run = run_tripod("train --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 "
                   "--mock-data --vocab-size 64 --micro-batch-size 2 --train-iters 1 --eval-interval 100 "
                   "--device cpu");
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_FALSE(contains(run.output, "--device overrides")) << run.output;
}

namespace {

// The "learning rate: X" of each logged iteration.
std::vector<double> logged_lrs(const std::string& out) {
  std::vector<double> lrs;
  const std::string key = "learning rate: ";
  for (size_t at = out.find(key); at != std::string::npos; at = out.find(key, at + 1))
    lrs.push_back(std::stod(out.substr(at + key.size(), 13)));
  return lrs;
}

const char* kTinyRun =
    "train --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --max-position-embeddings 16 "
    "--vocab-size 64 --mock-data --micro-batch-size 2 --global-batch-size 8 --log-interval 1 --eval-interval 0 "
    "--lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine ";

}  // namespace

// Megatron's sample-based run: --train-samples 44 at a global batch of 8 is
// 44 // 8 = 5 iterations, and the schedule counts samples stepped by 8:
// iteration i runs at the lr of (i-1) x 8 samples. By hand, warmup 16 and
// decay 40 samples: 0, 8/16, 1 (16 <= 16), then cosine over 24 samples at
// (24-16)/24 = 1/3 and 2/3: 1e-4 + 9e-4 x 0.75 and 1e-4 + 9e-4 x 0.25.
TEST(MegatronFlags, TrainSamplesCountTheScheduleInSamples) {
  auto run = run_tripod(std::string(kTinyRun) + "--train-samples 44 --lr-warmup-samples 16 --lr-decay-samples 40");
  ASSERT_EQ(run.code, 0) << run.output;
  const std::vector<double> want = {0.0, 5e-4, 1e-3, 7.75e-4, 3.25e-4};
  const std::vector<double> got = logged_lrs(run.output);
  ASSERT_EQ(got.size(), want.size()) << run.output;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-9) << "iteration " << i + 1;
  EXPECT_TRUE(contains(run.output, "iteration        5/       5")) << run.output;
  // --lr-warmup-fraction takes the decay samples: 0.25 x 40 = 10 samples, so
  // iteration 2 (8 samples) runs at 8/10 of the peak.
  run = run_tripod(std::string(kTinyRun) + "--train-samples 44 --lr-warmup-fraction 0.25 --lr-decay-samples 40");
  ASSERT_EQ(run.code, 0) << run.output;
  ASSERT_GE(logged_lrs(run.output).size(), 2u) << run.output;
  EXPECT_NEAR(logged_lrs(run.output)[1], 8e-4, 1e-9) << run.output;
}

TEST(MegatronFlags, TrainSamplesRefuseIterationCountsAndTheOtherWayRound) {
  auto run = run_tripod(std::string(kTinyRun) + "--train-samples 44 --train-iters 5");
  EXPECT_NE(run.code, 0);
  EXPECT_TRUE(contains(run.output, "--train-iters 5 and --train-samples 44 are both given")) << run.output;
  run = run_tripod(std::string(kTinyRun) + "--train-samples 44 --lr-warmup-iters 2");
  EXPECT_NE(run.code, 0);
  EXPECT_TRUE(contains(run.output, "give the schedule in samples: --lr-warmup-samples")) << run.output;
  run = run_tripod(std::string(kTinyRun) + "--train-iters 5 --lr-warmup-samples 16");
  EXPECT_NE(run.code, 0);
  EXPECT_TRUE(contains(run.output, "pass --train-samples for a sample-based run")) << run.output;
  run = run_tripod(std::string(kTinyRun) + "--train-samples 7");
  EXPECT_NE(run.code, 0);
  EXPECT_TRUE(contains(run.output, "--train-samples 7 is less than one global batch (8 samples)")) << run.output;
  run = run_tripod(std::string(kTinyRun));
  EXPECT_NE(run.code, 0);
  EXPECT_TRUE(contains(run.output, "pass --train-iters N (or Megatron's --train-samples N)")) << run.output;
}

// Megatron's --profile: the capture range covers iterations start+1 to end
// (as the log counts them) on --profile-ranks; the CPU backend says it has
// no range and trains on; bad windows and ranks stop at start.
TEST(MegatronFlags, ProfileWindowAndRanks) {
  auto run = run_tripod(std::string(kTinyRun) + "--train-iters 4 --profile --profile-step-start 1 --profile-step-end 3");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "--profile: the cpu backend has no profiler capture range; iterations 2-3 run as "
                                   "usual"))
      << run.output;
  run = run_tripod(std::string(kTinyRun) + "--train-iters 4 --profile --profile-ranks 1");
  ASSERT_NE(run.code, 0);  // a single process has no rank 1
  EXPECT_TRUE(contains(run.output, "--profile-ranks 1: not a rank of this job (1 ranks)")) << run.output;
  run = run_tripod(std::string(kTinyRun) + "--train-iters 4 --profile --profile-step-start 3 --profile-step-end 3");
  EXPECT_NE(run.code, 0);
  EXPECT_TRUE(contains(run.output, "--profile-step-start 3 and --profile-step-end 3 give no iterations to profile"))
      << run.output;
  run = run_tripod("launch --nproc-per-node 2 -- " + std::string(kTinyRun) +
                   "--train-iters 3 --profile --profile-ranks 1 --profile-step-start 0 --profile-step-end 2");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "[rank 1] warning: --profile")) << run.output;
  EXPECT_FALSE(contains(run.output, "[rank 0] warning: --profile")) << run.output;
}

// Megatron-LM's published Llama 3 8B FP8 recipe (examples/llama/
// train_llama3_8b_h100_fp8.sh): every flag of its model, training,
// parallelism and logging arrays, at a tiny shape on 4 CPU ranks (TP 2 x CP 2
// with SP and the distributed optimizer), samples and the --profile window
// scaled down. It trains to the end, saves, and a second job with the
// same script resumes from the checkpoint (the script passes --load and
// --save the same folder). Left out: --tensorboard-dir (only to keep the
// test's folder small).
TEST(MegatronFlags, Llama3Fp8RecipeTrainsShrunk) {
  const std::string dir = ::testing::TempDir() + "/tripod_llama3_recipe_" + std::to_string(::getpid());
  const std::string recipe =
      "--use-mcore-models --num-layers 2 --hidden-size 64 --ffn-hidden-size 160 --num-attention-heads 4 "
      "--group-query-attention --num-query-groups 2 --kv-channels 16 --seq-length 64 --max-position-embeddings 64 "
      "--position-embedding-type rope --rotary-base 1000000 --rotary-percent 1.0 --attention-dropout 0.0 "
      "--hidden-dropout 0.0 --swiglu --normalization RMSNorm --init-method-std 0.0134 --attention-backend fused "
      "--apply-layernorm-1p --untie-embeddings-and-output-weights --disable-bias-linear --micro-batch-size 1 "
      "--global-batch-size 8 --train-samples 32 --lr-decay-samples 32 --lr-warmup-samples 8 --lr 0.00015 "
      "--min-lr 0.00001 --decoupled-lr 5.0e-4 --decoupled-min-lr 4.5e-5 --lr-decay-style cosine --clip-grad 1.0 "
      "--weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --bf16 --grad-reduce-in-bf16 --cross-entropy-loss-fusion "
      "--calculate-per-token-loss --manual-gc --empty-unused-memory-level 1 --exit-duration-in-mins 235 "
      "--fp8-format hybrid --fp8-amax-history-len 16 --fp8-amax-compute-algo max --fp8-param-gather "
      "--tensor-model-parallel-size 2 "
      "--context-parallel-size 2 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce "
      "--overlap-param-gather --log-interval 1 --eval-iters 1 --eval-interval 2 --save-interval 2 --log-throughput "
      "--profile --profile-step-start 1 --profile-step-end 2 --ckpt-format torch_dist --distributed-timeout-minutes 5 "
      "--mock-data --vocab-size 128 --save " + dir + " --load " + dir;
  auto run = run_tripod("launch --nproc-per-node 4 -- train " + recipe + " --exit-interval 2");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "saved checkpoint at iteration 2")) << run.output;
  EXPECT_TRUE(contains(run.output, "iteration 2 run as usual")) << run.output;  // the --profile window
  run = run_tripod("launch --nproc-per-node 4 -- train " + recipe);
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "iteration        4/       4")) << run.output;  // 32 samples / 8
  EXPECT_TRUE(contains(run.output, "saved checkpoint at iteration 4")) << run.output;
  EXPECT_FALSE(contains(run.output, "iteration        1/")) << run.output;  // resumed at 3
  std::filesystem::remove_all(dir);
}

// Megatron-LM's Mixtral 8x7B script (examples/mixtral/
// train_mixtral_8x7b_distributed.sh): its model, MoE, training, parallelism
// and logging flags as they are, at a tiny shape on 4 CPU ranks (PP 2 x
// EP 2 instead of PP 4 x EP 8), mock data instead of its tokenizer and data
// files, fewer iterations; --tensorboard-dir into the test's folder.
TEST(MegatronFlags, MixtralScriptTrainsShrunk) {
  const std::string dir = ::testing::TempDir() + "/tripod_mixtral_script_" + std::to_string(::getpid());
  const std::string script =
      "--use-mcore-models --disable-bias-linear --seq-length 64 --max-position-embeddings 256 --num-layers 2 "
      "--hidden-size 64 --ffn-hidden-size 160 --num-attention-heads 4 --init-method-std 0.01 --attention-dropout 0.0 "
      "--hidden-dropout 0.0 --normalization RMSNorm --position-embedding-type rope --swiglu "
      "--untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2 "
      "--no-masked-softmax-fusion --no-position-embedding --rotary-base 1000000 "
      "--num-experts 8 --moe-router-topk 2 --moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 1e-2 "
      "--moe-grouped-gemm --moe-token-dispatcher-type alltoall --overlap-param-gather --overlap-grad-reduce "
      "--mock-data --vocab-size 128 --split 99990,8,2 "
      "--micro-batch-size 1 --global-batch-size 8 --lr 1e-4 --train-iters 4 --lr-decay-iters 3 "
      "--lr-decay-style cosine --min-lr 1.0e-5 --weight-decay 0.1 --lr-warmup-iters 1 --clip-grad 1.0 --bf16 "
      "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2 "
      "--use-distributed-optimizer --sequence-parallel "
      "--log-interval 1 --save-interval 2 --eval-interval 2 --eval-iters 1 --save " + dir + " --load " + dir +
      " --tensorboard-dir " + dir + "/tensorboard --no-load-optim --no-load-rng";
  auto run = run_tripod("launch --nproc-per-node 4 -- train " + script);
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "iteration        4/       4")) << run.output;
  EXPECT_TRUE(contains(run.output, "saved checkpoint at iteration 4")) << run.output;
  std::filesystem::remove_all(dir);
}
