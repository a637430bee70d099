// What keeps one run from losing another's checkpoints, and a stopped run
// from losing its own work, through the real CLI on mock data:
//
//   - two jobs with one --save folder: the second refuses at start, naming
//     the first's host and pid (ckpt/save_lock.h); a holder killed with
//     SIGKILL is taken over with a log line;
//   - a fresh run into a folder with another run's checkpoints refuses
//     (naming --save-into-existing); with the flag, the latest marker goes
//     back with a log line and --save-retain removes only this run's
//     iterations, each with a log line (hand-counted folder contents);
//   - an unwritable --save, --metrics-file or --tensorboard-dir stops the
//     run before the model is built, naming the path, the errno text and the
//     fix; a file-system error met later is the user's error (exit 2), never
//     an internal one;
//   - SIGINT / SIGTERM: the run finishes its iteration, saves, names the
//     signal and the checkpoint, exits 128 + the signal; a second signal
//     stops it at once; a signal to one rank of two stops both at the same
//     iteration; tripod launch forwards SIGINT and exits with the ranks'
//     status; the checkpoint written resumes;
//   - --train-iters at or below the loaded iteration says there is nothing
//     to train, and exits 0.
//
// Each case runs a few tiny-model jobs (0.5-3 s each on 2 busy cores).
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include "comm/proc_util.h"

namespace fs = std::filesystem;
using namespace tripod::testing;

namespace {

const std::string kModel =
    " train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data --vocab-size 300 "
    "--micro-batch-size 1 --global-batch-size 4 --lr 1e-3 --log-interval 1 --eval-interval 0 --seed 3 ";

std::string train(const std::string& flags) { return tripod_bin() + kModel + flags; }

int64_t latest_of(const std::string& dir) {
  const std::string s = read_file(dir + "/latest_checkpointed_iteration.txt");
  return s.empty() ? -1 : std::stoll(s);
}

std::vector<std::string> iter_dirs(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("iter_", 0) == 0) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A shell loop that waits (up to 120 s) until `file` holds `text`.
std::string wait_for(const std::string& file, const std::string& text) {
  return "for i in $(seq 1 1200); do grep -q '" + text + "' " + file + " 2>/dev/null && break; sleep 0.1; done; ";
}

}  // namespace

TEST(SaveGuard, SecondJobWithTheSameSaveFolderIsRefusedAndTheFirstStopsOnSigint) {
  const std::string dir = temp_dir("guard_lock"), d = dir + "/ck";
  // Job A trains "forever"; job B, with the same --save, must refuse; then A
  // gets SIGINT, saves where it stopped and exits 130.
  const std::string script =
      train("--train-iters 1000000 --save " + d) + " > " + dir + "/a.log 2>&1 & A=$!; echo $A > " + dir +
      "/a.pid; " + wait_for(dir + "/a.log", "iteration        2/") +
      train("--train-iters 4 --save " + d) + " > " + dir + "/b.log 2>&1; echo $? > " + dir + "/b.code; " +
      "kill -INT $A; wait $A; echo $? > " + dir + "/a.code";
  const RunResult r = run_shell(script, 180);
  ASSERT_FALSE(r.timed_out) << r.output;
  const std::string a = read_file(dir + "/a.log"), b = read_file(dir + "/b.log");
  const std::string pid = std::to_string(std::stoll(read_file(dir + "/a.pid")));
  char host[256] = "";
  ::gethostname(host, sizeof host - 1);
  EXPECT_EQ(std::stoi(read_file(dir + "/b.code")), 2) << b;
  EXPECT_TRUE(contains(b, "--save " + d + " is in use by another job (host " + std::string(host) + ", pid " + pid))
      << b;
  EXPECT_FALSE(contains(b, "GPT:")) << "refused after building the model:\n" << b;
  EXPECT_EQ(std::stoi(read_file(dir + "/a.code")), 130) << a;
  const int64_t it = latest_of(d);
  ASSERT_GT(it, 1) << a;
  char name[32];
  std::snprintf(name, sizeof name, "iter_%07lld", static_cast<long long>(it));
  EXPECT_TRUE(contains(a, "exiting after iteration " + std::to_string(it) + ": SIGINT received; checkpoint " + name +
                              " in " + d)) << a;
  EXPECT_EQ(iter_dirs(d), std::vector<std::string>{name}) << a;  // saved once, where it stopped
  // The released lock names no holder; resuming from the folder is allowed.
  EXPECT_EQ(read_file(d + "/tripod_save.lock"), "");
  const RunResult c = run_shell(train("--train-iters " + std::to_string(it + 1) + " --load " + d + " --save " + d), 60);
  EXPECT_EQ(c.code, 0) << c.output;
  EXPECT_TRUE(contains(c.output, "loaded checkpoint " + d + "/" + name)) << c.output;
}

TEST(SaveGuard, LockOfAKilledJobIsTakenOverWithALogLine) {
  const std::string dir = temp_dir("guard_dead"), d = dir + "/ck";
  const RunResult killed = run_shell("TRIPOD_FAULT=kill@0:3 " + train("--train-iters 6 --save " + d), 60);
  ASSERT_EQ(killed.code, 128 + SIGKILL) << killed.output;
  const std::string record = read_file(d + "/tripod_save.lock");
  ASSERT_TRUE(contains(record, "\"pid\":")) << record;  // the dead holder's record stays
  const RunResult next = run_shell(train("--train-iters 2 --save " + d), 60);
  EXPECT_EQ(next.code, 0) << next.output;
  EXPECT_TRUE(contains(next.output, "--save " + d + ": took over the save-folder lock from a job that is no longer "
                                    "running (host ")) << next.output;
}

TEST(SaveGuard, AnotherRunsCheckpointsAreRefusedAndNeverRemoved) {
  const std::string dir = temp_dir("guard_foreign"), d = dir + "/ck";
  RunResult r = run_shell(train("--train-iters 10 --save-interval 5 --save " + d), 60);
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_EQ(iter_dirs(d), (std::vector<std::string>{"iter_0000005", "iter_0000010"}));
  // A fresh run, and a run that loads another folder: refused, nothing written.
  r = run_shell(train("--train-iters 3 --save " + d), 60);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--save " + d + " already holds checkpoints of another run (iterations 5, 10; "
                                 "latest 10) and this run does not resume from them (there is no --load)")) << r.output;
  EXPECT_TRUE(contains(r.output, "--save-into-existing")) << r.output;
  EXPECT_FALSE(contains(r.output, "GPT:")) << r.output;
  const std::string other = dir + "/other";
  ASSERT_EQ(run_shell(train("--train-iters 2 --save " + other), 60).code, 0);
  r = run_shell(train("--train-iters 3 --load " + other + " --save " + d), 60);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--load names another folder, " + other)) << r.output;
  EXPECT_EQ(latest_of(d), 10);
  // Saving beside them on purpose: the marker goes back with a line, and
  // --save-retain 1 removes this run's iterations 1 and 2, never 5 or 10.
  r = run_shell(train("--train-iters 3 --save-interval 1 --save-retain 1 --save-into-existing --save " + d), 60);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "latest_checkpointed_iteration.txt in " + d + " went back from 10 to 1")) << r.output;
  EXPECT_TRUE(contains(r.output, "removed " + d + "/iter_0000001 (--save-retain 1")) << r.output;
  EXPECT_TRUE(contains(r.output, "removed " + d + "/iter_0000002 (--save-retain 1")) << r.output;
  EXPECT_FALSE(contains(r.output, "iter_0000005 (--save-retain")) << r.output;
  EXPECT_EQ(iter_dirs(d), (std::vector<std::string>{"iter_0000003", "iter_0000005", "iter_0000010"}));
  EXPECT_EQ(latest_of(d), 3);
}

TEST(SaveGuard, UnwritablePathsStopTheRunBeforeTheModelIsBuilt) {
  const std::string dir = temp_dir("guard_paths"), file = dir + "/a_file";
  { std::ofstream(file) << "x"; }
  struct Case {
    std::string flags, want;
  };
  const std::vector<Case> cases = {
      {"--save " + file + "/ck", "cannot write --save " + file + "/ck: creating the folder failed: Not a directory"},
      {"--metrics-file " + file + "/m.jsonl",
       "cannot write --metrics-file " + file + "/m.jsonl: creating its folder " + file + " failed: "},
      {"--tensorboard-dir " + file + "/tb",
       "cannot write --tensorboard-dir " + file + "/tb: creating the folder failed: Not a directory"},
  };
  for (const auto& c : cases) {
    const RunResult r = run_shell(train("--train-iters 2 " + c.flags), 60);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_TRUE(contains(r.output, c.want)) << r.output;
    EXPECT_TRUE(contains(r.output, "hint: a part of the path is a file, not a folder (ls -ld " + file + ")") ||
                contains(r.output, "hint: check the path")) << r.output;
    EXPECT_FALSE(contains(r.output, "internal error")) << r.output;
    EXPECT_FALSE(contains(r.output, "GPT:")) << r.output;
  }
  // A file-system error the checks cannot foresee (a file where the save's
  // folder goes, met at the first save) is the user's error, not an internal one.
  const std::string in_the_way = dir + "/ck_file";
  fs::create_directories(in_the_way);
  { std::ofstream(in_the_way + "/iter_0000002.tmp") << "x"; }
  const RunResult late = run_shell(train("--train-iters 2 --save " + in_the_way), 60);
  EXPECT_EQ(late.code, 2) << late.output;
  EXPECT_TRUE(contains(late.output, "error: cannot access " + in_the_way + "/iter_0000002.tmp: Not a directory"))
      << late.output;
  EXPECT_FALSE(contains(late.output, "internal error")) << late.output;
  if (::geteuid() != 0) {  // root writes through permissions
    const std::string ro = dir + "/read_only";
    fs::create_directories(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    const RunResult r = run_shell(train("--train-iters 2 --save " + ro + "/ck"), 60);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "cannot write --save " + ro + "/ck: creating the folder failed: Permission denied"))
        << r.output;
    EXPECT_TRUE(contains(r.output, "fix the permissions (ls -ld " + ro + ")")) << r.output;
    fs::permissions(ro, fs::perms::owner_all);
  }
}

TEST(SaveGuard, SecondSignalStopsAtOnceWithoutASave) {
  const std::string dir = temp_dir("guard_twice"), d = dir + "/ck";
  // Each micro-batch's load sleeps 1 s: an iteration takes 4 s, so the
  // second SIGTERM arrives inside the iteration the first one let finish.
  const std::string script = "TRIPOD_TESTING_DATA_SLEEP_MS=1000 " + train("--train-iters 100 --save " + d) + " > " +
                             dir + "/a.log 2>&1 & A=$!; " + wait_for(dir + "/a.log", "memory on rank 0") +
                             "kill -TERM $A; " + wait_for(dir + "/a.log", "SIGTERM received") +
                             "kill -TERM $A; wait $A; echo $? > " + dir + "/a.code";
  const RunResult r = run_shell(script, 120);
  ASSERT_FALSE(r.timed_out) << r.output;
  const std::string a = read_file(dir + "/a.log");
  EXPECT_EQ(std::stoi(read_file(dir + "/a.code")), 128 + SIGTERM) << a;
  EXPECT_TRUE(contains(a, "tripod: second signal (SIGTERM): stopping now, without a checkpoint")) << a;
  EXPECT_FALSE(contains(a, "saved checkpoint")) << a;
}

TEST(SaveGuard, SignalToOneRankStopsEveryRankAtTheSameIteration) {
  const std::string dir = temp_dir("guard_onerank"), d = dir + "/ck";
  const std::string port = std::to_string(free_port());
  std::string script;
  for (int k = 0; k < 2; ++k)
    script += "RANK=" + std::to_string(k) + " WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port +
              " TRIPOD_JOB_TOKEN=one " + train("--train-iters 1000000 --tensor-model-parallel-size 2 --log-interval "
                                               "1000 --distributed-timeout-minutes 1 --save " + d) +
              " > " + dir + "/r" + std::to_string(k) + ".log 2>&1 & R" + std::to_string(k) + "=$!; ";
  // SIGTERM to rank 1 only (the logging rank); rank 0 saves.
  script += wait_for(dir + "/r1.log", "memory on rank 1") + "sleep 0.5; kill -TERM $R1; wait $R0; echo $? > " + dir +
            "/r0.code; wait $R1; echo $? > " + dir + "/r1.code";
  const RunResult r = run_shell(script, 180);
  ASSERT_FALSE(r.timed_out) << r.output;
  const std::string l0 = read_file(dir + "/r0.log"), l1 = read_file(dir + "/r1.log");
  EXPECT_EQ(std::stoi(read_file(dir + "/r0.code")), 128 + SIGTERM) << l0;
  EXPECT_EQ(std::stoi(read_file(dir + "/r1.code")), 128 + SIGTERM) << l1;
  EXPECT_FALSE(contains(l0, "SIGTERM received: stopping after")) << "rank 0 got no signal:\n" << l0;
  const int64_t it = latest_of(d);
  ASSERT_GT(it, 0) << l0 << l1;
  char name[32];
  std::snprintf(name, sizeof name, "iter_%07lld", static_cast<long long>(it));
  EXPECT_TRUE(contains(l1, "exiting after iteration " + std::to_string(it) + ": SIGTERM received; checkpoint " + name))
      << l1;
  EXPECT_TRUE(contains(l0, "saved checkpoint at iteration " + std::to_string(it))) << l0;
  EXPECT_TRUE(fs::exists(d + "/" + name + "/model_rank_1_0.safetensors")) << l1;
}

TEST(SaveGuard, LaunchForwardsSigintAndExitsWithTheRanksStatus) {
  const std::string dir = temp_dir("guard_launch"), d = dir + "/ck";
  const std::string script = tripod_bin() + " launch --nproc-per-node 2" +
                             kModel.substr(0) + "--train-iters 1000000 --tensor-model-parallel-size 2 --log-interval "
                             "1000 --save " + d + " > " + dir + "/l.log 2>&1 & L=$!; " +
                             wait_for(dir + "/l.log", "memory on rank 1") + "kill -INT $L; wait $L; echo $? > " + dir +
                             "/l.code";
  const RunResult r = run_shell(script, 180);
  ASSERT_FALSE(r.timed_out) << r.output;
  const std::string l = read_file(dir + "/l.log");
  EXPECT_EQ(std::stoi(read_file(dir + "/l.code")), 128 + SIGINT) << l;
  EXPECT_TRUE(contains(l, "tripod launch: got SIGINT, forwarding it to every rank")) << l;
  const int64_t it = latest_of(d);
  ASSERT_GT(it, 0) << l;
  EXPECT_TRUE(contains(l, "[rank 1] exiting after iteration " + std::to_string(it) + ": SIGINT received")) << l;
  // The checkpoint resumes.
  const RunResult c = run_shell(train("--train-iters " + std::to_string(it + 1) + " --load " + d + " --save " + d), 60);
  EXPECT_EQ(c.code, 0) << c.output;
}

TEST(SaveGuard, TrainItersAtTheLoadedIterationSaysThereIsNothingToTrain) {
  const std::string dir = temp_dir("guard_nothing"), d = dir + "/ck";
  ASSERT_EQ(run_shell(train("--train-iters 4 --save " + d), 60).code, 0);
  for (const std::string iters : {"4", "3"}) {
    const RunResult r = run_shell(train("--train-iters " + iters + " --load " + d + " --save " + d), 60);
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "nothing to train: the checkpoint loaded from " + d + " is at iteration 4 and "
                                   "--train-iters is " + iters)) << r.output;
    EXPECT_FALSE(contains(r.output, "saved checkpoint")) << r.output;
  }
  EXPECT_EQ(iter_dirs(d), std::vector<std::string>{"iter_0000004"});
}
