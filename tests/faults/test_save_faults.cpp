// A process killed in the middle of a checkpoint save, at every kind of
// file operation the save makes (TRIPOD_CKPT_KILL_AT=n: SIGKILL at the n-th
// operation, a write after half of its bytes; the operations are listed by
// TRIPOD_CKPT_TRACE=1). Through the real CLI, on mock data with dropout on:
//
//   1. a reference run trains 6 iterations uninterrupted, saving at 2, 4, 6;
//   2. a run trains to K = 2 and saves (for `resave`: and on to 4, saving);
//   3. the killed run loads it, trains to 2K = 4 and is killed while saving
//      iteration 4 (`resave`: it resumes with --ckpt-step 2 from a folder
//      whose latest is 4, so its save replaces iter_0000004);
//   4. the folder must still load: the marker names 2 when the kill came
//      before the marker's rename and 4 after it, and the checkpoint it names
//      holds the reference's bytes; resuming from it to 3K = 6 gives the
//      reference's losses bit for bit and its iteration-6 files byte for
//      byte; what the killed save left (iter_N.tmp/, the marker's temporary,
//      iter_N.old) is removed or moved back with a log line, and nothing is
//      left over at the end.
//
// Scenarios: tp2_launch (TP2 under tripod launch, --save-retain 1 so that
// the removal of the older checkpoint is one of the points), one_process
// (one process, no launcher) and resave (one process, a re-save of an
// existing iteration: the case that lost the latest checkpoint before the
// reader learnt to read iter_N.old). The smoke trials are the default run's
// subset; the seeded runs kill at every operation of the save at least once
// (20 trials each, in a seeded order).
//
// Measured on 2 shared cores (load average 3-4, Release CPU build), over
// five runs: a TP2 trial 0.3-1.7 s (the killed run, launcher included, ends
// 0.10-0.62 s after it started, 3-55 ms after the kill; the resume to
// iteration 6 0.12-1.30 s), a one-process or re-save trial 0.1-0.5 s.
// faults_save_smoke (4 trials plus the set-up runs) 2.2-7.0 s; the seeded
// runs faults_save_tp2_launch 10-31 s, faults_save_one_process 2.0-8.4 s,
// faults_save_resave 2.0-4.9 s (60 trials together 14-40 s).
//
// usage: test_save_faults --gtest_filter=SaveFaults.Smoke*    (the default run's 4 trials)
//        test_save_faults --gtest_filter=SaveFaults.Twenty*   (3 x 20 seeded trials)
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include "ckpt/common.h"
#include "comm/proc_util.h"

namespace fs = std::filesystem;
using namespace tripod::testing;

namespace {

const std::string kModel =
    "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data --vocab-size 300 "
    "--micro-batch-size 1 --global-batch-size 4 --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine "
    "--lr-warmup-iters 1 --lr-decay-iters 6 --hidden-dropout 0.1 --seed 7 --log-interval 1 --eval-interval 0 "
    "--save-interval 2 --distributed-timeout-minutes 0.1";
const std::string kMarker = "latest_checkpointed_iteration.txt";

struct Scenario {
  std::string name;
  int nproc = 1;
  std::string flags;   // layout, retention
  bool resave = false;  // the killed save replaces an existing iter_0000004
};
const Scenario kTp2{"tp2_launch", 2, "--tensor-model-parallel-size 2 --save-retain 1", false};
const Scenario kOne{"one_process", 1, "", false};
const Scenario kResave{"resave", 1, "", true};

RunResult train(const Scenario& s, const std::string& env, const std::string& flags) {
  const std::string launch = s.nproc > 1 ? " launch --nproc-per-node " + std::to_string(s.nproc) : "";
  return run_shell(env + " " + tripod_bin() + launch + " train " + kModel + " " + s.flags + " " + flags, 120);
}

std::string iter_dir(int64_t it) {
  char b[32];
  std::snprintf(b, sizeof b, "iter_%07lld", static_cast<long long>(it));
  return b;
}

int64_t latest_of(const std::string& dir) {
  const std::string s = read_file(dir + "/" + kMarker);
  return s.empty() ? -1 : std::stoll(s);
}

// Every rank file of `a` (an iteration folder) has the same bytes in `b`.
void expect_same_rank_files(const std::string& a, const std::string& b, const std::string& what) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(a)) {
    if (e.path().extension() != ".safetensors") continue;
    ++n;
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(read_file(e.path().string()) == read_file(b + "/" + name)) << what << ": " << name << " differs";
  }
  EXPECT_GT(n, 0) << what << ": no rank files in " << a;
}

struct Prepared {
  std::string root, ref, base;
  std::vector<std::pair<int64_t, double>> ref_losses;  // iterations 1..6
  std::vector<std::string> ops;  // rank 0's file operations in the killed run's save, folder names relative
  int64_t marker_rename = 0;     // the operation that moves the marker (1-based)
};

std::string killed_flags(const Scenario& s, const std::string& dir) {
  return "--train-iters 4 --load " + dir + " --save " + dir + (s.resave ? " --ckpt-step 2" : "");
}

std::map<std::string, Prepared>& prepared_cache() {
  static std::map<std::string, Prepared> cache;
  return cache;
}

// Removes the scratch folders at the end when every test passed.
struct CleanUp : ::testing::Environment {
  void TearDown() override {
    if (::testing::UnitTest::GetInstance()->failed_test_count() != 0) return;
    for (const auto& [name, p] : prepared_cache()) fs::remove_all(p.root);
  }
};
[[maybe_unused]] auto* const g_clean_up = ::testing::AddGlobalTestEnvironment(new CleanUp);

// The reference, the folder the killed runs start from, and the list of the
// save's operations (a run of the killed configuration with TRIPOD_CKPT_TRACE=1).
const Prepared& prepared(const Scenario& s) {
  auto& cache = prepared_cache();
  auto it = cache.find(s.name);
  if (it != cache.end()) return it->second;
  Prepared p;
  p.root = temp_dir("savefault_" + s.name);
  p.ref = p.root + "/ref";
  p.base = p.root + "/base";
  // The reference keeps every checkpoint (no retention), so each iteration can be compared.
  Scenario plain = s;
  plain.flags = s.nproc > 1 ? "--tensor-model-parallel-size 2" : "";
  RunResult r = train(plain, "", "--train-iters 6 --save " + p.ref + " --metrics-file " + p.root + "/ref.jsonl");
  EXPECT_EQ(r.code, 0) << r.output;
  p.ref_losses = ckpt_test::losses(p.root + "/ref.jsonl");
  EXPECT_EQ(p.ref_losses.size(), 6u) << r.output;
  r = train(s, "", "--train-iters 2 --save " + p.base);
  EXPECT_EQ(r.code, 0) << r.output;
  if (s.resave) {
    r = train(s, "", "--train-iters 4 --load " + p.base + " --save " + p.base);
    EXPECT_EQ(r.code, 0) << r.output;
  }
  for (int64_t i : s.resave ? std::vector<int64_t>{2, 4} : std::vector<int64_t>{2})
    expect_same_rank_files(p.ref + "/" + iter_dir(i), p.base + "/" + iter_dir(i), "the starting folder");
  const std::string count = p.root + "/count";
  fs::copy(p.base, count, fs::copy_options::recursive);
  r = train(s, "TRIPOD_CKPT_TRACE=1", killed_flags(s, count));
  EXPECT_EQ(r.code, 0) << r.output;
  std::istringstream lines(r.output);
  const std::string tag = "TRIPOD_CKPT_TRACE: ";
  for (std::string line; std::getline(lines, line);) {
    const auto at = line.find(tag);
    if (at == std::string::npos || (s.nproc > 1 && line.rfind("[rank 0] ", 0) != 0)) continue;
    std::istringstream f(line.substr(at + tag.size()));
    int64_t n = 0;
    std::string what;
    f >> n;
    std::getline(f >> std::ws, what);
    EXPECT_EQ(n, static_cast<int64_t>(p.ops.size()) + 1) << line;
    for (size_t k; (k = what.find(count + "/")) != std::string::npos;) what.erase(k, count.size() + 1);
    if (what.size() > count.size() && what.substr(what.size() - count.size()) == count)
      what.replace(what.size() - count.size(), count.size(), "<save dir>");
    p.ops.push_back(what);
    if (what.rfind("rename " + kMarker + ".tmp.", 0) == 0) p.marker_rename = n;
  }
  EXPECT_GE(p.ops.size(), 9u) << r.output;  // mkdir, 2 writes, fsync, rename, fsync, marker write, rename, fsync
  EXPECT_GT(p.marker_rename, 0) << r.output;
  expect_same_rank_files(p.ref + "/" + iter_dir(4), count + "/" + iter_dir(4), "a save without a kill");
  std::printf("[%s] the save of iteration 4 makes %zu file operations on rank 0:\n", s.name.c_str(), p.ops.size());
  for (size_t i = 0; i < p.ops.size(); ++i) std::printf("  %2zu %s\n", i + 1, p.ops[i].c_str());
  return cache.emplace(s.name, std::move(p)).first->second;
}

// The operation whose description starts with `prefix` (after `skip` earlier matches).
int64_t op_index(const Scenario& s, const std::string& prefix, int skip = 0) {
  const auto& ops = prepared(s).ops;
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].rfind(prefix, 0) == 0 && skip-- == 0) return static_cast<int64_t>(i) + 1;
  ADD_FAILURE() << s.name << ": the save has no operation '" << prefix << "'";
  return 1;
}

// Kills the save at operation `n` and checks the folder, the resume and the clean-up.
void run_trial(const Scenario& s, int64_t n) {
  const Prepared& p = prepared(s);
  ASSERT_FALSE(p.ops.empty()) << s.name << ": the set-up runs failed";
  ASSERT_GE(n, 1);
  ASSERT_LE(n, static_cast<int64_t>(p.ops.size()));
  const std::string op = p.ops[static_cast<size_t>(n - 1)];
  SCOPED_TRACE(s.name + ": kill at operation " + std::to_string(n) + " (" + op + ")");
  static int trial = 0;
  const std::string d = p.root + "/trial" + std::to_string(++trial);
  fs::copy(p.base, d, fs::copy_options::recursive);

  const RunResult killed = train(s, "TRIPOD_CKPT_KILL_AT=" + std::to_string(n), killed_flags(s, d));
  ASSERT_FALSE(killed.timed_out) << killed.output;
  EXPECT_NE(killed.code, 0) << killed.output;
  EXPECT_TRUE(contains(killed.output, "TRIPOD_CKPT_KILL_AT: SIGKILL at checkpoint file operation " +
                                          std::to_string(n) + " (")) << killed.output;
  if (s.nproc > 1) {
    EXPECT_TRUE(contains(killed.output, "tripod launch: rank 0 (pid")) << killed.output;
    EXPECT_TRUE(contains(killed.output, "tripod launch: failed: rank 0 exited with code 137")) << killed.output;
  }
  EXPECT_FALSE(contains(killed.output, "saved checkpoint at iteration 4")) << killed.output;

  // The folder as the kill left it: the marker moved only if the kill came after its rename.
  const int64_t latest = latest_of(d);
  EXPECT_EQ(latest, s.resave || n > p.marker_rename ? 4 : 2) << "marker rename is operation " << p.marker_rename;
  std::string loads = d + "/" + iter_dir(latest);
  const bool aside = s.resave && !fs::exists(loads);  // killed between the re-save's two renames
  if (aside) loads += ".old";
  expect_same_rank_files(p.ref + "/" + iter_dir(latest), loads, "the checkpoint the marker names");
  const bool tmp_left = fs::exists(d + "/" + iter_dir(4) + ".tmp");
  const bool old_left = fs::exists(d + "/" + iter_dir(4) + ".old");
  // Killed after the commit rename, before the marker moved: a complete iteration 4 the marker does not name.
  const bool unmarked = !s.resave && latest == 2 && fs::exists(d + "/" + iter_dir(4));
  EXPECT_EQ(unmarked, !s.resave && n > op_index(s, "rename iter_0000004.tmp") && n <= p.marker_rename);
  if (unmarked) expect_same_rank_files(p.ref + "/" + iter_dir(4), d + "/" + iter_dir(4), "the unmarked iteration 4");
  bool marker_tmp_left = false;
  for (const auto& e : fs::directory_iterator(d))
    marker_tmp_left |= e.path().filename().string().rfind(kMarker + ".tmp.", 0) == 0;

  const RunResult resumed =
      train(s, "", "--train-iters 6 --load " + d + " --save " + d + " --metrics-file " + d + "/resume.jsonl");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "loaded checkpoint " + loads + " (iteration " + std::to_string(latest)))
      << resumed.output;
  if (tmp_left)
    EXPECT_TRUE(contains(resumed.output, "removed " + d + "/" + iter_dir(4) + ".tmp (") &&
                contains(resumed.output, "left by a checkpoint save that failed or was killed"))
        << resumed.output;
  if (unmarked)
    EXPECT_TRUE(contains(resumed.output, "also holds iter_0000004, newer than iteration 2")) << resumed.output;
  if (marker_tmp_left)
    EXPECT_TRUE(contains(resumed.output, "removed " + d + "/" + kMarker + ".tmp.")) << resumed.output;
  if (aside) {
    EXPECT_TRUE(contains(resumed.output, "holds the earlier save of iteration 4")) << resumed.output;
    EXPECT_TRUE(contains(resumed.output, "moved " + d + "/" + iter_dir(4) + ".old back to")) << resumed.output;
  } else if (old_left) {
    EXPECT_TRUE(contains(resumed.output, "removed " + d + "/" + iter_dir(4) + ".old (")) << resumed.output;
  }
  std::vector<std::pair<int64_t, double>> want;
  for (const auto& l : p.ref_losses)
    if (l.first > latest) want.push_back(l);
  EXPECT_EQ(ckpt_test::losses(d + "/resume.jsonl"), want) << "the resumed losses are not the reference's";
  EXPECT_EQ(latest_of(d), 6);
  expect_same_rank_files(p.ref + "/" + iter_dir(6), d + "/" + iter_dir(6), "iteration 6 after the resume");
  for (const auto& e : fs::directory_iterator(d)) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name.find(".tmp") == std::string::npos && name.find(".old") == std::string::npos)
        << name << " was left over";
  }
  std::printf("[%s] kill at %2lld %-48s killed run %.2f s, resumed from %lld in %.2f s\n", s.name.c_str(),
              static_cast<long long>(n), op.c_str(), killed.seconds, static_cast<long long>(latest),
              resumed.seconds);
  if (!::testing::Test::HasFailure()) fs::remove_all(d);
}

// Every operation at least once (when there are at most 20), in a seeded order.
std::vector<int64_t> seeded_points(uint32_t seed, int64_t n_ops) {
  std::mt19937 rng(seed);
  std::vector<int64_t> out, round(static_cast<size_t>(n_ops));
  while (out.size() < 20) {
    std::iota(round.begin(), round.end(), 1);
    std::shuffle(round.begin(), round.end(), rng);
    for (int64_t k : round)
      if (out.size() < 20) out.push_back(k);
  }
  return out;
}

void twenty_trials(const Scenario& s, uint32_t seed) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t n : seeded_points(seed, static_cast<int64_t>(prepared(s).ops.size()))) run_trial(s, n);
  std::printf("[%s] 20 trials in %.1f s\n", s.name.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

// The default run's subset: a torn rank file, the commit point, after the
// marker moved, and between the two renames of a re-save.
TEST(SaveFaults, SmokeTornRankFileTp2UnderLaunch) {
  run_trial(kTp2, op_index(kTp2, "write iter_0000004.tmp/model_rank_0"));
}
TEST(SaveFaults, SmokeJustAfterTheCommitRenameTp2UnderLaunch) {
  run_trial(kTp2, op_index(kTp2, "rename iter_0000004.tmp") + 1);
}
TEST(SaveFaults, SmokeAfterTheMarkerMovedOneProcess) {
  run_trial(kOne, op_index(kOne, "rename " + kMarker + ".tmp.") + 1);
}
TEST(SaveFaults, SmokeBetweenTheRenamesOfAResave) { run_trial(kResave, op_index(kResave, "rename iter_0000004.tmp")); }

TEST(SaveFaults, TwentySeededTrialsTp2UnderLaunch) { twenty_trials(kTp2, 17); }
TEST(SaveFaults, TwentySeededTrialsOneProcess) { twenty_trials(kOne, 1717); }
TEST(SaveFaults, TwentySeededTrialsResave) { twenty_trials(kResave, 171717); }
