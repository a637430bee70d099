// Exact resume and reshard-on-load through the CLI (`tripod train` and
// `tripod launch`), on mock data with dropout on:
//   resume_1rank       8 iterations straight == 4, save, load, 4: losses bit for bit
//   resume_tp2_dp2     the same under tripod launch at TP2 x DP2 (4 ranks)
//   reshard_tp2_dp2    save at TP2 x DP2 after 4 iterations; load at TP1 (1 rank),
//                      TP4 (4 ranks), DP2 (2 ranks): iterations 5..8 match the
//                      uninterrupted TP2 x DP2 run within 1e-5 relative
//   resume_tp2_pp2_dp2 the same at TP2 x PP2 x DP2 with the distributed optimizer (8 ranks)
//   reshard_tp2_pp2_dp2 save there; load at TP1 x PP1 x DP1, TP4 x PP1 x DP2 and
//                      TP1 x PP4 x DP2, within 1e-5 relative
//   reshard_llama      the Llama family (grouped qkv, SwiGLU, untied output layer):
//                      save at TP2 x DP2; load at TP1 (1 rank) and PP2 x DP2 (4 ranks)
//   reshard_moe        experts (sigmoid routing, expert bias, shared expert): save at
//                      EP2; load at EP1, EP4 and PP2 x EP2; each rank stores (and
//                      the checkpoint's files hold) only its ep rank's experts; saved
//                      under ZeRO-3 at EP2 x DP2, loaded at EP1 and EP2 (distributed optimizer);
//                      saved at EP1 (every expert in one file, as before) and loaded at EP2;
//                      the experts split over tp (ETP2 at TP2) saved, loaded whole on one
//                      process, at TP2 x ETP1 and EP2 x ETP2; saved at TP2 x ETP1, loaded at ETP2
//   fp8_dpa            --fp8-dot-product-attention: the attention metas saved and
//                      resumed bit for bit; loads across the flag
//   fp8_param_gather   --fp8-param-gather saves the bytes a run without it saves, and
//                      each resumes from the other's checkpoint bit for bit (fp32, dp2)
//   wrong_args         a contradicting --hidden-size / --seed is an error naming both values
//   zero_*             ZeRO-2/-3: the same checkpoint bytes as the distributed
//                      optimizer and as no sharding (the streamed save, also in
//                      small pieces), ZeRO-3 resume, loads across strategies, layouts
//                      and distributed-optimizer instance counts
// The first half runs with --train-iters 4 and --lr-decay-iters 8, so its
// learning rates are those of the 8-iteration run.
//
// usage: test_resume (gtest filters pick the case)
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <tuple>

#include "common.h"

namespace {

using namespace ckpt_test;

const std::string kModel =
    "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --mock-data --vocab-size 500 "
    "--micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 2 "
    "--lr-decay-iters 8 --clip-grad 1.0 --weight-decay 0.1 --adam-eps 1e-6 --hidden-dropout 0.1 --seed 7 "
    "--log-interval 1 --eval-interval 0";

std::string train_cmd(int nproc, const std::string& flags) {
  const std::string bin = env("TRIPOD_BIN");
  return nproc == 1 ? bin + " train " + kModel + " " + flags
                    : bin + " launch --nproc-per-node " + std::to_string(nproc) + " train " + kModel + " " + flags;
}

void run(const Scratch& s, const std::string& name, int nproc, const std::string& flags,
         const std::string& env_vars = "") {
  const std::string cmd = env_vars + train_cmd(nproc, flags + " --metrics-file " + (s / (name + ".jsonl")).string()) +
                          " > " + (s / (name + ".log")).string() + " 2>&1";
  ASSERT_EQ(sh(cmd), 0) << name << " failed; see " << s / (name + ".log");
}

// Straight, then 4 + save + load + 4 at the same layout: identical bits.
void resume_case(const std::string& tag, int nproc, const std::string& layout) {
  Scratch s(tag);
  run(s, "straight", nproc, layout + " --train-iters 8");
  run(s, "first", nproc, layout + " --train-iters 4 --save " + (s / "ck").string());
  run(s, "second", nproc, layout + " --train-iters 8 --load " + (s / "ck").string());
  const auto full = losses(s / "straight.jsonl"), a = losses(s / "first.jsonl"), b = losses(s / "second.jsonl");
  ASSERT_EQ(full.size(), 8u);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(a[i], full[i]) << "iteration " << i + 1;
    EXPECT_EQ(b[i], full[i + 4]) << "iteration " << i + 5 << " after resume";
  }
  EXPECT_LT(full.back().second, full.front().second) << "the run did not learn";
  if (!::testing::Test::HasFailure()) fs::remove_all(s.dir);
}

TEST(Resume, OneRankBitExact) { resume_case("resume1", 1, ""); }

TEST(Resume, Tp2Dp2BitExact) { resume_case("resume_tp2dp2", 4, "--tensor-model-parallel-size 2"); }

// FP8 with delayed scaling: the amax histories and scales travel in the
// checkpoint (model/fp8_meta.h), so the resumed run quantizes with the
// scales the straight run had: bit for bit again. A history of 4 with the
// max algorithm, so the history itself matters, not only the last amax.
const std::string kFp8Delayed = "--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 4 "
                                "--fp8-amax-compute-algo max";

TEST(Fp8Checkpoint, DelayedOneRankBitExact) { resume_case("resume_fp8", 1, kFp8Delayed); }
TEST(Fp8Checkpoint, DelayedTp2Dp2BitExact) {
  resume_case("resume_fp8_tp2dp2", 4, kFp8Delayed + " --tensor-model-parallel-size 2 --sequence-parallel");
}

// Blockwise (current block) scaling keeps no state: every cast takes its
// scales from the tensor it casts, so a resumed run quantizes as the
// straight one did, bit for bit, with nothing FP8 in the checkpoint.
TEST(Fp8Checkpoint, BlockwiseOneRankBitExact) {
  resume_case("resume_fp8_blockwise", 1, "--fp8-format hybrid --fp8-recipe blockwise");
}

// Without the saved state the resumed run would start from scale 1: the
// losses after the load differ (so the bit-exact resume above is the
// state's doing). And the precisions load each other's checkpoints: an FP8
// run a bf16-path (here fp32) checkpoint with fresh FP8 state, a run
// without FP8 an FP8 run's checkpoint (the FP8 tensors ignored).
TEST(Fp8Checkpoint, CrossPrecisionLoads) {
  Scratch s("fp8_cross");
  run(s, "plain4", 1, "--train-iters 4 --save " + (s / "plain").string());
  run(s, "fp8_from_plain", 1, kFp8Delayed + " --train-iters 8 --load " + (s / "plain").string());
  run(s, "fp8_4", 1, kFp8Delayed + " --train-iters 4 --save " + (s / "fp8").string());
  run(s, "plain_from_fp8", 1, "--train-iters 8 --load " + (s / "fp8").string());
  run(s, "fp8_straight", 1, kFp8Delayed + " --train-iters 8");
  const auto fresh = losses(s / "fp8_from_plain.jsonl"), plain = losses(s / "plain_from_fp8.jsonl"),
             straight = losses(s / "fp8_straight.jsonl");
  ASSERT_EQ(fresh.size(), 4u);
  ASSERT_EQ(plain.size(), 4u);
  ASSERT_EQ(straight.size(), 8u);
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(std::isfinite(fresh[i].second) && std::isfinite(plain[i].second));
  // The fp32 run's weights with scale-1 FP8 state are not the FP8 run's
  // weights with its own state: some loss after the load differs.
  bool differs = false;
  for (size_t i = 0; i < 4; ++i) differs |= fresh[i].second != straight[i + 4].second;
  EXPECT_TRUE(differs);
  EXPECT_NE(slurp(s / "fp8_from_plain.log").find("FP8 delayed scaling state: 0 tensors loaded"), std::string::npos);
  if (!::testing::Test::HasFailure()) fs::remove_all(s.dir);
}

// --fp8-dot-product-attention: each FP8 layer's attention adds six metas
// (qkv, s, o, dout, dp, dqkv), saved as the linears' are, under the global
// names <layer>.self_attention.core_attention.<tensor>.{scale,scale_inv,
// amax_history}: the resumed run quantizes Q/K/V, P, O, dO, dS and dQKV
// with the straight run's scales, bit for bit.
const std::string kFp8Dpa = kFp8Delayed + " --fp8-dot-product-attention";

TEST(Fp8Checkpoint, DotProductAttentionBitExact) { resume_case("resume_fp8_dpa", 1, kFp8Dpa); }

// The attention's tensors are in the checkpoint; an FP8 run without the
// flag loads it (ignoring them: its linears' 144 tensors loaded), and a
// run with the flag loads an FP8 checkpoint without them with fresh
// attention state (the 72 = 4 layers x 6 x 3 tensors), saying so.
TEST(Fp8Checkpoint, DotProductAttentionCrossLoads) {
  Scratch s("fp8_dpa_cross");
  run(s, "dpa4", 1, kFp8Dpa + " --train-iters 4 --save " + (s / "dpa").string());
  run(s, "fp84", 1, kFp8Delayed + " --train-iters 4 --save " + (s / "fp8").string());
  std::string saved;
  for (const auto& e : fs::recursive_directory_iterator(s / "dpa"))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") saved += slurp(e.path());
  for (const char* t : {"qkv", "s", "o", "dout", "dp", "dqkv"})
    for (const char* f : {"scale", "scale_inv", "amax_history"}) {
      const std::string name = std::string("fp8.decoder.layers.3.self_attention.core_attention.") + t + "." + f;
      EXPECT_NE(saved.find("\"" + name + "\""), std::string::npos) << name << " not saved";
    }
  run(s, "fp8_from_dpa", 1, kFp8Delayed + " --train-iters 8 --load " + (s / "dpa").string());
  run(s, "dpa_from_fp8", 1, kFp8Dpa + " --train-iters 8 --load " + (s / "fp8").string());
  for (const char* name : {"fp8_from_dpa", "dpa_from_fp8"}) {
    const auto got = losses(s / (std::string(name) + ".jsonl"));
    ASSERT_EQ(got.size(), 4u) << name;
    for (const auto& [it, loss] : got) EXPECT_TRUE(std::isfinite(loss)) << name << " iteration " << it;
  }
  EXPECT_NE(slurp(s / "fp8_from_dpa.log").find("FP8 delayed scaling state: 144 tensors loaded, 0 fresh"),
            std::string::npos);
  EXPECT_NE(slurp(s / "dpa_from_fp8.log").find("FP8 delayed scaling state: 144 tensors loaded, 72 fresh"),
            std::string::npos);
  if (!::testing::Test::HasFailure()) fs::remove_all(s.dir);
}

// --fp8-param-gather changes no checkpoint: a save with the flag writes the
// bytes a save without it writes (the whole fp32 masters, gathered for the
// save, and the same FP8 state), and each run resumes from the other's
// checkpoint. In fp32 the flag's run is the plain FP8 run bit for bit (the
// parity suite's fp8_param_gather_*_fp32_bitwise), so both resumes give the
// uninterrupted plain run's losses bit for bit.
TEST(Fp8Checkpoint, ParamGatherSameBytesResumesBothWays) {
  Scratch s("fp8_param_gather");
  const std::string pg = kFp8Delayed + " --use-distributed-optimizer";
  run(s, "straight", 2, pg + " --train-iters 8");
  run(s, "plain4", 2, pg + " --train-iters 4 --save " + (s / "plain").string());
  run(s, "pg4", 2, pg + " --fp8-param-gather --train-iters 4 --save " + (s / "pg").string());
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(s / "plain")) {
    if (!e.is_regular_file()) continue;
    const fs::path rel = fs::relative(e.path(), s / "plain");
    EXPECT_EQ(slurp(s / "pg" / rel), slurp(e.path())) << rel << " differs";
    ++files;
  }
  EXPECT_GE(files, 3u);  // metadata, the ranks' tensors, the latest-iteration marker
  run(s, "pg_from_plain", 2, pg + " --fp8-param-gather --train-iters 8 --load " + (s / "plain").string());
  run(s, "plain_from_pg", 2, pg + " --train-iters 8 --load " + (s / "pg").string());
  const auto full = losses(s / "straight.jsonl");
  ASSERT_EQ(full.size(), 8u);
  for (const char* name : {"pg_from_plain", "plain_from_pg"}) {
    const auto got = losses(s / (std::string(name) + ".jsonl"));
    ASSERT_EQ(got.size(), 4u) << name;
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(got[i], full[i + 4]) << name << ": iteration " << i + 5;
  }
  if (!::testing::Test::HasFailure()) fs::remove_all(s.dir);
}

struct Target {
  const char* name;
  int nproc;
  const char* flags;
};

// Saves at `layout` after 4 iterations, loads at each target and continues
// to 8: within 1e-5 of the uninterrupted run at `layout`.
// check (optional): more checks on the scratch directory (the checkpoint in
// ck/, the runs' logs) before it is removed.
void reshard_case(const std::string& tag, int nproc, const std::string& layout, const std::vector<Target>& targets,
                  const std::function<void(const Scratch&)>& check = {}) {
  Scratch s(tag);
  run(s, "straight", nproc, layout + " --train-iters 8");
  run(s, "first", nproc, layout + " --train-iters 4 --save " + (s / "ck").string());
  const auto full = losses(s / "straight.jsonl");
  ASSERT_EQ(full.size(), 8u);
  for (const Target& t : targets) {
    run(s, t.name, t.nproc, std::string(t.flags) + " --train-iters 8 --load " + (s / "ck").string());
    const auto got = losses(s / (std::string(t.name) + ".jsonl"));
    ASSERT_EQ(got.size(), 4u) << t.name;
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(got[i].first, full[i + 4].first);
      EXPECT_NEAR(got[i].second, full[i + 4].second, 1e-5 * std::fabs(full[i + 4].second))
          << t.name << " iteration " << got[i].first;
    }
  }
  if (check) check(s);
  if (!::testing::Test::HasFailure()) fs::remove_all(s.dir);
}

const std::string kTp2Pp2 = "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --use-distributed-optimizer";

TEST(Resume, Tp2Pp2Dp2DistOptBitExact) { resume_case("resume_tp2pp2dp2", 8, kTp2Pp2); }

TEST(Reshard, SaveTp2Dp2LoadTp1Tp4Dp2) {
  reshard_case("reshard", 4, "--tensor-model-parallel-size 2",
               {{"tp1", 1, ""}, {"tp4", 4, "--tensor-model-parallel-size 4"}, {"dp2", 2, ""}});
}

TEST(Reshard, SaveTp2Pp2Dp2LoadTp1Tp4Dp2Pp4Dp2) {
  reshard_case("reshard_pp", 8, kTp2Pp2,
               {{"tp1_pp1_dp1", 1, ""},
                {"tp4_pp1_dp2", 8, "--tensor-model-parallel-size 4"},
                {"tp1_pp4_dp2", 8, "--pipeline-model-parallel-size 4 --use-distributed-optimizer"}});
}

// ZeRO-2/-3 (docs/zero.md) write today's format: at one micro-batch per
// step without clipping their weights are the distributed optimizer's bit
// for bit, and so is every byte of the checkpoint. A ZeRO-3 run resumes bit
// for bit, and checkpoints move between strategies and layouts both ways.
const std::string kZero2 = "--data-parallel-sharding-strategy optim_grads";
const std::string kZero3 = "--data-parallel-sharding-strategy optim_grads_params --overlap-grad-reduce "
                           "--overlap-param-gather";

// The sharded strategies' saves gather each parameter's value and moments
// from the shards a piece at a time (NOTE [Streamed shard save]); without
// sharding (dp2, the same sums at dp2 as the distributed optimizer's) every
// rank holds them whole and the save gathers nothing, so its rank files are
// the independent reference. ZeRO-3 is also saved in pieces of 777
// elements (TRIPOD_CKPT_SAVE_WINDOW), which cut parameters and shards at
// odd places: the same bytes.
TEST(ZeroCheckpoint, SameBytesAsTheDistributedOptimizer) {
  Scratch s("zero_bytes");
  const std::string one_mb = " --global-batch-size 4 --clip-grad 0 --train-iters 3 --save ";
  run(s, "optim", 2, "--use-distributed-optimizer" + one_mb + (s / "optim").string());
  run(s, "no_shard", 2, "--data-parallel-sharding-strategy no_shard" + one_mb + (s / "no_shard").string());
  size_t rank_files = 0;
  for (const auto& e : fs::recursive_directory_iterator(s / "no_shard")) {
    if (e.path().extension() != ".safetensors") continue;
    const fs::path rel = fs::relative(e.path(), s / "no_shard");
    EXPECT_EQ(slurp(s / "optim" / rel), slurp(e.path())) << "optim: " << rel << " differs from no_shard's";
    ++rank_files;
  }
  EXPECT_EQ(rank_files, 1u);
  const std::string small_pieces = "TRIPOD_CKPT_SAVE_WINDOW=777 ";
  for (const auto& [name, flags, env_vars] : {std::tuple{"zero2", kZero2, ""}, std::tuple{"zero3", kZero3, ""},
                                              std::tuple{"zero3_pieces", kZero3, small_pieces.c_str()}}) {
    run(s, name, 2, flags + one_mb + (s / name).string(), env_vars);
    size_t files = 0;
    for (const auto& e : fs::recursive_directory_iterator(s / "optim")) {
      if (!e.is_regular_file()) continue;
      const fs::path rel = fs::relative(e.path(), s / "optim");
      EXPECT_EQ(slurp(s / name / rel), slurp(e.path())) << name << ": " << rel << " differs";
      ++files;
    }
    EXPECT_GE(files, 3u);  // metadata, the rank's tensors, the latest-iteration marker
  }
  if (!::testing::Test::HasFailure()) fs::remove_all(s.dir);
}

TEST(ZeroCheckpoint, Zero3Dp2ResumeBitExact) { resume_case("resume_zero3", 2, kZero3); }

TEST(ZeroCheckpoint, SaveZero3LoadNoShardOptimZero2) {
  reshard_case("reshard_zero3", 2, kZero3,
               {{"no_shard_1rank", 1, ""},
                {"optim_tp2", 2, "--tensor-model-parallel-size 2 --use-distributed-optimizer"},
                {"zero2_dp4", 4, kZero2.c_str()}});
}

const std::string kZero3Pp2 = "--pipeline-model-parallel-size 2 " + kZero3;
TEST(ZeroCheckpoint, SaveOptimLoadZero3) {
  reshard_case("reshard_to_zero3", 2, "--use-distributed-optimizer",
               {{"zero3_dp2", 2, kZero3.c_str()}, {"zero3_pp2_dp2", 4, kZero3Pp2.c_str()}});
}

// Hybrid sharding (--num-distributed-optimizer-instances): each instance's
// shards are the dp layout's at a smaller dp, and the checkpoint is written
// in full-parameter order all the same, so a save with 2 instances of 2
// ranks loads with 4 instances of 1 rank, with one instance (plain ZeRO
// over dp4) and with no sharding at dp2.
const std::string kZero3Instances2 = kZero3 + " --num-distributed-optimizer-instances 2";
const std::string kZero2Instances4 = kZero2 + " --num-distributed-optimizer-instances 4";
TEST(ZeroCheckpoint, SaveInstances2LoadInstances4PlainDp) {
  reshard_case("reshard_instances", 4, kZero3Instances2,
               {{"zero2_instances4", 4, kZero2Instances4.c_str()},
                {"optim_dp4", 4, "--use-distributed-optimizer"},
                {"no_shard_dp2", 2, ""}});
}

// Grouped qkv rows (whole groups per tp rank), SwiGLU's gate and up halves,
// and the untied output layer reshard on load like the GPT-2 tensors.
const std::string kLlama =
    " --num-attention-heads 8 --group-query-attention --num-query-groups 2 --position-embedding-type rope "
    "--normalization RMSNorm --swiglu --ffn-hidden-size 128 --untie-embeddings-and-output-weights "
    "--disable-bias-linear ";
const std::string kLlamaTp1 = kLlama, kLlamaPp2 = kLlama + "--pipeline-model-parallel-size 2";

TEST(Reshard, LlamaSaveTp2Dp2LoadTp1Pp2Dp2) {
  reshard_case("reshard_llama", 4, kLlama + "--tensor-model-parallel-size 2",
               {{"tp1", 1, kLlamaTp1.c_str()}, {"pp2_dp2", 4, kLlamaPp2.c_str()}});
}

// Context parallelism is not part of the saved layout: a checkpoint written
// at cp 2 (the distributed optimizer's shards over dp x cp) continues at cp 1,
// and one written at cp 1 continues at cp 2 and at tp 2 x cp 2, each with the
// uninterrupted run's losses.
TEST(Reshard, SaveCp2LoadCp1) {
  reshard_case("reshard_cp2", 2, "--context-parallel-size 2 --use-distributed-optimizer",
               {{"cp1", 1, ""}, {"cp1_dp2", 2, "--use-distributed-optimizer"}});
}

TEST(Reshard, SaveCp1LoadCp2) {
  reshard_case("reshard_cp1", 1, "",
               {{"cp2", 2, "--context-parallel-size 2 --use-distributed-optimizer"},
                {"tp2_cp2", 4, "--tensor-model-parallel-size 2 --context-parallel-size 2 --sequence-parallel"}});
}

// Mixture of experts (docs/moe.md): the router, the expert bias (updated
// from the loads each step), every expert and the shared expert, saved at
// ep 2 and loaded at ep 1, ep 4 and pp 2 x ep 2.
const std::string kMoe =
    " --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 --moe-aux-loss-coeff 1e-2 "
    "--moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-2 "
    "--moe-shared-expert-intermediate-size 32 ";
const std::string kMoeEp4 = kMoe + "--expert-model-parallel-size 4",
                  kMoePp2Ep2 = kMoe + "--pipeline-model-parallel-size 2 --expert-model-parallel-size 2";

// The parameters rank 0 stores, from its start-up memory line
// ("memory on rank 0 (tp 0 pp 0 dp 0): N params; ...").
int64_t rank0_params(const fs::path& log) {
  const std::string text = slurp(log);
  const size_t at = text.find("memory on rank 0 (");
  if (at == std::string::npos) return -1;
  const size_t num = text.find("): ", at);
  return num == std::string::npos ? -1 : std::stoll(text.substr(num + 3));
}

// Each ep rank stores only its experts (docs/moe.md, "Expert
// parallelism"): 4 MoE layers of 4 experts, each expert fc1 (32, 64) + 32
// and fc2 (64, 32) + 64 = 4192 parameters; rank 0 holds 2 of them per
// layer at ep 2 and 1 at ep 4. The checkpoint saved at ep 2 keeps ep rank
// 1's experts in model_rank_0_0_ep1.safetensors, with nothing else.
void check_expert_storage(const Scratch& s) {
  constexpr int64_t kExpert = 32 * 64 + 32 + 64 * 32 + 64, kLayers = 4;
  const int64_t ep1 = rank0_params(s / "ep1.log"), ep2 = rank0_params(s / "first.log"),
                ep4 = rank0_params(s / "ep4.log");
  ASSERT_GT(ep1, 0) << "no memory line in " << s / "ep1.log";
  EXPECT_EQ(ep1 - ep2, kLayers * 2 * kExpert) << "ep 2 stores 2 of the 4 experts per layer";
  EXPECT_EQ(ep1 - ep4, kLayers * 3 * kExpert) << "ep 4 stores 1 of the 4 experts per layer";
  const fs::path it = s / "ck" / "iter_0000004";
  const std::string rank0 = slurp(it / "model_rank_0_0.safetensors"), ep_1 = slurp(it / "model_rank_0_0_ep1.safetensors");
  ASSERT_FALSE(ep_1.empty()) << "ep rank 1 wrote no model_rank_0_0_ep1.safetensors";
  for (int l = 0; l < kLayers; ++l)
    for (int e = 0; e < 4; ++e) {
      const std::string name = "model.decoder.layers." + std::to_string(l) + ".mlp.experts.local_experts." +
                               std::to_string(e) + ".linear_fc1.weight\"";
      EXPECT_EQ(rank0.find(name) != std::string::npos, e < 2) << name << " in model_rank_0_0";
      EXPECT_EQ(ep_1.find(name) != std::string::npos, e >= 2) << name << " in model_rank_0_0_ep1";
    }
  EXPECT_EQ(ep_1.find("self_attention"), std::string::npos) << "dense parameters belong in model_rank_0_0 only";
  EXPECT_EQ(ep_1.find("shared_experts"), std::string::npos) << "the shared expert belongs in model_rank_0_0 only";
}

TEST(Reshard, MoeSaveEp2LoadEp1Ep4Pp2Ep2) {
  reshard_case("reshard_moe", 2, kMoe + "--expert-model-parallel-size 2",
               {{"ep1", 1, kMoe.c_str()}, {"ep4", 4, kMoeEp4.c_str()}, {"pp2_ep2", 4, kMoePp2Ep2.c_str()}},
               check_expert_storage);
}

// A checkpoint with every expert in one file (saved at ep 1, as every
// MoE checkpoint was before the ep ranks wrote their own) loads at ep 2,
// each rank taking its experts from it.
TEST(Reshard, MoeSaveEp1LoadEp2) {
  reshard_case("reshard_moe_ep1", 1, kMoe, {{"ep2", 2, (kMoe + "--expert-model-parallel-size 2").c_str()}});
}

// The experts' optimizer state sharded over edp (ZeRO-3 at ep 2 x dp 2:
// the experts' buckets reduce-scattered and gathered over edp, the dense
// ones over dp) is saved whole and loads without sharding and at ep 2
// with the distributed optimizer.
const std::string kMoeEp2Zero3 = kMoe + "--expert-model-parallel-size 2 " + kZero3,
                  kMoeEp2DistOpt = kMoe + "--expert-model-parallel-size 2 --use-distributed-optimizer";

TEST(Reshard, MoeSaveEp2Dp2Zero3LoadEp1Ep2DistOpt) {
  reshard_case("reshard_moe_zero3", 4, kMoeEp2Zero3,
               {{"ep1", 1, kMoe.c_str()}, {"ep2_distopt", 2, kMoeEp2DistOpt.c_str()}});
}

// The experts split over the tp group (--expert-tensor-parallel-size 2 at
// tp 2): each tp rank stores and writes its pieces of every expert (fc1's
// columns, fc2's rows, fc2's bias whole) into its model_rank_<tp>_<pp> file
// with the tensor's split, as the dense tp-split tensors, so the checkpoint
// loads unsplit on one process and at tp 2 with whole experts per rank
// (etp 1), and one saved with whole experts loads split, with ep 2 too.
const std::string kSp = "--tensor-model-parallel-size 2 --sequence-parallel ";
const std::string kMoeEtp2 = kMoe + kSp + "--expert-tensor-parallel-size 2",
                  kMoeEtp1 = kMoe + kSp + "--expert-tensor-parallel-size 1",
                  kMoeEp2Etp2 = kMoeEtp2 + " --expert-model-parallel-size 2";

// 4 MoE layers of 4 experts: at etp 2 a rank holds half of each expert's
// fc1 (16 x 64 + 16) and fc2 weight (64 x 16), and fc2's whole bias (64).
void check_expert_split(const Scratch& s) {
  constexpr int64_t kExpert = 32 * 64 + 32 + 64 * 32 + 64, kPiece = 16 * 64 + 16 + 64 * 16 + 64, kLayers = 4;
  const int64_t etp1 = rank0_params(s / "tp2_etp1.log"), etp2 = rank0_params(s / "first.log");
  ASSERT_GT(etp1, 0) << "no memory line in " << s / "tp2_etp1.log";
  EXPECT_EQ(etp1 - etp2, kLayers * 4 * (kExpert - kPiece)) << "etp 2 stores half of every expert";
}

TEST(Reshard, MoeSaveEtp2LoadEtp1Single) {
  reshard_case("reshard_moe_etp2", 2, kMoeEtp2,
               {{"single", 1, kMoe.c_str()}, {"tp2_etp1", 2, kMoeEtp1.c_str()}, {"ep2_etp2", 4, kMoeEp2Etp2.c_str()}},
               check_expert_split);
}

TEST(Reshard, MoeSaveEtp1LoadEtp2) {
  reshard_case("reshard_moe_etp1", 2, kMoeEtp1, {{"tp2_etp2", 2, kMoeEtp2.c_str()}});
}

// Saved at ep 2 x etp 2 (each ep rank's tp pieces in model_rank_<tp>_0_ep1),
// loaded whole on one process.
TEST(Reshard, MoeSaveEtp2Ep2LoadSingle) {
  reshard_case("reshard_moe_ep2_etp2", 4, kMoeEp2Etp2, {{"single", 1, kMoe.c_str()}});
}

TEST(Load, ContradictingArgumentsNameBothValues) {
  Scratch s("args");
  run(s, "first", 1, "--train-iters 1 --save " + (s / "ck").string());
  const std::string log = (s / "bad.log").string();
  const std::string bad = env("TRIPOD_BIN") + " train " + kModel + " --hidden-size 32 --train-iters 2 --load " +
                          (s / "ck").string() + " > " + log + " 2>&1";
  EXPECT_NE(sh(bad), 0);
  const std::string out = slurp(log);
  EXPECT_NE(out.find("the model flags contradict the checkpoint"), std::string::npos) << out;
  EXPECT_NE(out.find("--hidden-size 32: the checkpoint has 64"), std::string::npos) << out;
  EXPECT_NE(out.find("use the checkpoint's model flags: --hidden-size 64"), std::string::npos) << out;
  const std::string seed = env("TRIPOD_BIN") + " train " + kModel + " --seed 8 --train-iters 2 --load " +
                           (s / "ck").string() + " > " + log + " 2>&1";
  EXPECT_NE(sh(seed), 0);
  EXPECT_NE(slurp(log).find("--no-load-rng"), std::string::npos) << slurp(log);
  // --no-load-rng and a layout change are allowed.
  run(s, "ok", 2, "--seed 8 --no-load-rng --train-iters 2 --tensor-model-parallel-size 2 --load " +
                      (s / "ck").string());
  EXPECT_EQ(losses(s / "ok.jsonl").size(), 1u);
  if (!HasFailure()) fs::remove_all(s.dir);
}

// A save killed at its n-th file operation (TRIPOD_CKPT_FAIL_AT, see NOTE
// [Failure injection] in ckpt/atomic_io.h), through `tripod train`: the run
// fails, and --load resumes from the previous checkpoint (or the new one when
// only the clean-up failed) with the losses of the uninterrupted run.
void failure_case(const std::string& tag, int nproc, const std::string& layout, const std::vector<int>& points) {
  Scratch s(tag);
  run(s, "straight", nproc, layout + " --train-iters 6");
  const auto full = losses(s / "straight.jsonl");
  ASSERT_EQ(full.size(), 6u);
  run(s, "first", nproc, layout + " --train-iters 2 --save " + (s / "base").string());
  for (int n : points) {
    const std::string ck = (s / ("ck" + std::to_string(n))).string();
    fs::copy(s / "base", ck, fs::copy_options::recursive);
    const std::string cmd = "TRIPOD_CKPT_FAIL_AT=" + std::to_string(n) + " " +
                            train_cmd(nproc, layout + " --train-iters 4 --load " + ck + " --save " + ck +
                                             " --save-retain 1") + " > " + (s / "fail.log").string() + " 2>&1";
    const int rc = sh(cmd);
    if (rc == 0) break;  // n is past the last operation of a save: all points covered
    EXPECT_NE(slurp(s / "fail.log").find("injected checkpoint failure"), std::string::npos) << slurp(s / "fail.log");
    fs::remove(s / "resumed.jsonl");
    run(s, "resumed", nproc, layout + " --train-iters 6 --load " + ck);
    const auto got = losses(s / "resumed.jsonl");
    ASSERT_TRUE(got.size() == 4u || got.size() == 2u) << "operation " << n;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], full[6 - got.size() + i]) << "operation " << n << ", resumed iteration " << got[i].first;
    fs::remove_all(ck);
  }
  if (!::testing::Test::HasFailure()) fs::remove_all(s.dir);
}

// --exit-signal-handler: SIGTERM mid-run saves at the next iteration
// boundary and exits 0; the checkpoint resumes where the run stopped.
TEST(Signal, SigtermSavesAndExitsZero) {
  Scratch s("signal");
  const std::string metrics = (s / "run.jsonl").string(), ck = (s / "ck").string();
  const std::string cmd = train_cmd(1, "--train-iters 100000 --exit-signal-handler --save " + ck + " --metrics-file " +
                                           metrics) + " > " + (s / "run.log").string() + " 2>&1 & echo $! > " +
                          (s / "pid").string() + "; wait $!";
  // The shell waits for the trainer; a second shell sends SIGTERM after 3 logged iterations.
  const std::string killer = "for i in $(seq 600); do [ $(cat " + metrics +
                             " 2>/dev/null | grep -c lm_loss) -ge 3 ] && break; sleep 0.05; done; kill -TERM $(cat " +
                             (s / "pid").string() + ")";
  const std::string both = "(" + killer + ") & " + cmd;
  ASSERT_EQ(sh("bash -c '" + both + "'"), 0) << slurp(s / "run.log");
  const auto got = losses(metrics);
  ASSERT_GE(got.size(), 3u);
  EXPECT_NE(slurp(s / "run.log").find("SIGTERM received"), std::string::npos) << slurp(s / "run.log");
  EXPECT_EQ(slurp(s / "ck" / "latest_checkpointed_iteration.txt"), std::to_string(got.back().first) + "\n");
  if (!HasFailure()) fs::remove_all(s.dir);
}

TEST(SaveFailure, EveryFileOperationOneRank) {
  std::vector<int> all;
  for (int n = 1; n <= 14; ++n) all.push_back(n);
  failure_case("fail1", 1, "", all);
}

// A save that finds the disk full (TRIPOD_CKPT_FAIL_ENOSPC: the rank file's
// write stops with ENOSPC after half its bytes): the error names the folder
// and the bytes needed, no iter_N.tmp/ is left to keep the disk full, and
// the next run saves and resumes. A .tmp/ of a save that was killed (SIGKILL
// gives no chance to clean up) is removed by the next save, with a log line.
TEST(SaveFailure, FullDiskNamesFolderAndBytesAndLeavesNoTemporary) {
  Scratch s("fail_enospc");
  const std::string ck = (s / "ck").string();
  run(s, "first", 1, "--train-iters 2 --save " + ck);
  // Operations of the save at iteration 4: 1 mkdir iter_0000004.tmp, 2 the rank file.
  const std::string cmd = "TRIPOD_CKPT_FAIL_AT=2 TRIPOD_CKPT_FAIL_ENOSPC=1 " +
                          train_cmd(1, "--train-iters 4 --load " + ck + " --save " + ck) + " > " +
                          (s / "full.log").string() + " 2>&1";
  EXPECT_NE(sh(cmd), 0);
  const std::string log = slurp(s / "full.log");
  const std::string tmp = (s / "ck" / "iter_0000004.tmp").string();
  EXPECT_NE(log.find("no space left in " + tmp), std::string::npos) << log;
  EXPECT_NE(log.find("more are needed"), std::string::npos) << log;
  EXPECT_NE(log.find("free at least"), std::string::npos) << log;
  EXPECT_EQ(log.find("terminate called"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(tmp)) << log;
  EXPECT_EQ(slurp(s / "ck" / "latest_checkpointed_iteration.txt"), "2\n");
  // A killed save's debris (and a marker temporary of a dead process): removed by the next save.
  fs::create_directories(s / "ck" / "iter_0000003.tmp");
  std::ofstream(s / "ck" / "iter_0000003.tmp" / "model_rank_0_0.safetensors") << std::string(1000, 'x');
  run(s, "next", 1, "--train-iters 4 --load " + ck + " --save " + ck);
  const std::string next = slurp(s / "next.log");
  EXPECT_NE(next.find("removed " + (s / "ck" / "iter_0000003.tmp").string() + " (1000 bytes)"), std::string::npos)
      << next;
  EXPECT_FALSE(fs::exists(s / "ck" / "iter_0000003.tmp"));
  EXPECT_EQ(slurp(s / "ck" / "latest_checkpointed_iteration.txt"), "4\n");
  if (!HasFailure()) fs::remove_all(s.dir);
}

TEST(SaveFailure, Tp2Dp2) { failure_case("fail_tp2dp2", 4, "--tensor-model-parallel-size 2", {1, 3}); }

// Under ZeRO-3 the rank file is written while the other rank sends its
// pieces (NOTE [Streamed shard save]): a write that fails (operation 2, the
// rank file) is held until the gathers end, so every rank stops cleanly, and
// the run resumes from the earlier checkpoint bit for bit.
TEST(SaveFailure, Zero3Dp2WriteFailsMidGather) { failure_case("fail_zero3", 2, kZero3, {2}); }

}  // namespace
