// Faults end a job quickly and say why: a rank that never starts, a rank
// that hangs, a rank killed mid-collective, a stranger with the wrong job
// token, an unreachable MASTER_ADDR:PORT, and Ctrl-C on the launcher.
// Timeouts are short (--distributed-timeout-minutes 0.05 = 3 s).
#include <gtest/gtest.h>

#include "proc_util.h"

using namespace tripod::testing;

static const std::string kTimeout = " --distributed-timeout-minutes 0.05";

// Starts ranks `first..last` of a world of `world` by hand (as a launcher
// would), each with its own token; writes each rank's output to dir/r<k>.log
// and its exit code to dir/r<k>.code.
static std::string manual_ranks(const std::string& dir, int world, int first, int last, int port,
                                const std::vector<std::string>& tokens, const std::string& args) {
  std::string cmd;
  for (int k = first; k <= last; ++k) {
    cmd += "(RANK=" + std::to_string(k) + " WORLD_SIZE=" + std::to_string(world) +
           " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
           " TRIPOD_JOB_TOKEN=" + tokens[size_t(k - first)] + " " + tripod_bin() + args + " > " + dir +
           "/r" + std::to_string(k) + ".log 2>&1; echo $? > " + dir + "/r" + std::to_string(k) +
           ".code) & ";
  }
  return cmd + "wait";
}

static int code_of(const std::string& dir, int k) {
  return std::atoi(read_file(dir + "/r" + std::to_string(k) + ".code").c_str());
}

TEST(Faults, RankThatNeverStartsIsNamedWithinTheTimeout) {
  const std::string dir = temp_dir("missing");
  // World of 4; rank 3 is never started. A 9 s timeout, so that on a loaded
  // machine ranks 1 and 2 have joined before rank 0 gives up; each joined
  // rank reads rank 0's verdict before rank 0 leaves (NOTE in comm/context.cpp).
  auto r = run_shell(manual_ranks(dir, 4, 0, 2, free_port(), {"t", "t", "t"},
                                  " bench comm --check --check-sizes 1 --distributed-timeout-minutes 0.15"),
                     120);
  ASSERT_FALSE(r.timed_out);
  EXPECT_LT(r.seconds, 60.0);
  for (int k = 0; k <= 2; ++k) {
    EXPECT_EQ(code_of(dir, k), 124) << read_file(dir + "/r" + std::to_string(k) + ".log");
    const std::string log = read_file(dir + "/r" + std::to_string(k) + ".log");
    EXPECT_TRUE(contains(log, "rank(s) [3] never joined (joined: 0, 1, 2)")) << log;
  }
}

// A stray process started with the same port, world size and token as a
// rank that already joined is refused, naming both processes; the job goes on.
TEST(Faults, SecondClaimOfARankIsRefusedNamingBothProcesses) {
  const std::string dir = temp_dir("stray");
  const std::string port = std::to_string(free_port());
  auto rank = [&](int k, const std::string& tag) {
    return "(RANK=" + std::to_string(k) + " WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port +
           " TRIPOD_JOB_TOKEN=t " + tripod_bin() + " bench comm --check --check-sizes 1 "
           "--distributed-timeout-minutes 1 > " + dir + "/" + tag + ".log 2>&1; echo $? > " + dir + "/" + tag +
           ".code) & ";
  };
  // Ranks 0 and two claimants of rank 1; rank 2 starts once one claimant has
  // been refused (its exit code is written), so the rendezvous is open.
  const std::string cmd = rank(0, "r0") + rank(1, "a") + rank(1, "b") +
                          "for i in $(seq 1 600); do [ -s " + dir + "/a.code ] || [ -s " + dir +
                          "/b.code ] && break; sleep 0.1; done; " + rank(2, "r2") + "wait";
  auto r = run_shell(cmd, 120);
  ASSERT_FALSE(r.timed_out) << r.output;
  const int a = std::atoi(read_file(dir + "/a.code").c_str()), b = std::atoi(read_file(dir + "/b.code").c_str());
  const std::string refused = a != 0 ? read_file(dir + "/a.log") : read_file(dir + "/b.log");
  EXPECT_TRUE((a == 0) != (b == 0)) << "exactly one claimant of rank 1 must be refused: " << a << " " << b;
  EXPECT_EQ(a == 0 ? b : a, 2) << refused;
  EXPECT_TRUE(contains(refused, "already has a rank 1 (")) << refused;
  EXPECT_TRUE(contains(refused, "was refused: two processes were started with RANK=1")) << refused;
  // Both processes named: the holder's "<host> pid N" and this one's.
  size_t pids = 0;
  for (size_t at = refused.find(" pid "); at != std::string::npos; at = refused.find(" pid ", at + 1)) ++pids;
  EXPECT_GE(pids, 2u) << refused;
  EXPECT_EQ(std::atoi(read_file(dir + "/r0.code").c_str()), 0) << read_file(dir + "/r0.log");
  EXPECT_EQ(std::atoi(read_file(dir + "/r2.code").c_str()), 0) << read_file(dir + "/r2.log");
}

TEST(Faults, HungRankIsNamedAndTheJobEnds) {
  auto r = run_shell(tripod_bin() + " launch --nproc-per-node 4 bench comm --check --check-sizes 1 "
                     "--fault-hang-rank 2" + kTimeout, 40);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.code, 124) << r.output;  // a TimeoutError's exit code
  EXPECT_TRUE(contains(r.output, "global rank(s) [2] of group world never reached all_reduce #1")) << r.output;
  EXPECT_TRUE(contains(r.output, "Recent collectives of this rank")) << r.output;  // flight recorder
  EXPECT_LT(r.seconds, 15.0);
}

TEST(Faults, RankKilledMidCollectiveEndsTheJobInSeconds) {
  // A 10-minute timeout: only fault propagation can end this quickly.
  auto r = run_shell(tripod_bin() + " launch --nproc-per-node 8 bench comm --check "
                     "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
                     "--check-sizes 1500001 --fault-kill-rank 5 --fault-kill-after-ms 200 "
                     "--distributed-timeout-minutes 10", 60);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.code, 128 + 9) << r.output;
  EXPECT_TRUE(contains(r.output, "tripod launch: rank 5")) << r.output;
  EXPECT_TRUE(contains(r.output, "was killed by signal 9")) << r.output;
  EXPECT_TRUE(contains(r.output, "failed: rank 5 exited with code 137")) << r.output;
  EXPECT_LT(r.seconds, 20.0);
}

TEST(Faults, WrongTokenIsRefused) {
  const std::string dir = temp_dir("token");
  auto r = run_shell(manual_ranks(dir, 2, 0, 1, free_port(), {"job-a", "job-b"},
                                  " bench comm --check --check-sizes 1" + kTimeout),
                     30);
  ASSERT_FALSE(r.timed_out);
  const std::string log0 = read_file(dir + "/r0.log"), log1 = read_file(dir + "/r1.log");
  EXPECT_NE(code_of(dir, 1), 0) << log1;
  EXPECT_TRUE(contains(log1, "refused this process: wrong job token")) << log1;
  EXPECT_TRUE(contains(log0, "refused a connection from 127.0.0.1")) << log0;  // logged by rank 0
  EXPECT_EQ(code_of(dir, 0), 124) << log0;  // and rank 1 never joined
  EXPECT_TRUE(contains(log0, "rank(s) [1] never joined")) << log0;
}

TEST(Faults, UnreachableStoreFailsWithTheChecklistInsideTheTimeout) {
  const std::string dir = temp_dir("unreach");
  const int port = free_port();  // nobody listens: rank 0 is never started
  auto r = run_shell(manual_ranks(dir, 2, 1, 1, port, {"t"}, " bench comm --check" + kTimeout), 30);
  ASSERT_FALSE(r.timed_out);
  const std::string log = read_file(dir + "/r1.log");
  EXPECT_EQ(code_of(dir, 1), 124) << log;
  EXPECT_TRUE(contains(log, "rank 1 could not reach the rendezvous store at 127.0.0.1:" + std::to_string(port)))
      << log;
  EXPECT_TRUE(contains(log, "nc -zv 127.0.0.1 " + std::to_string(port))) << log;
  EXPECT_TRUE(contains(log, "not localhost")) << log;
  EXPECT_GE(r.seconds, 2.9);
  EXPECT_LT(r.seconds, 8.0);
}

TEST(Faults, SigtermToTheLauncherReachesEveryRank) {
  auto r = run_shell(tripod_bin() + " launch --nproc-per-node 3 bench comm --check --check-sizes 1 "
                     "--fault-hang-rank 0 --distributed-timeout-minutes 10", 30, [](pid_t pid) {
                       std::this_thread::sleep_for(std::chrono::milliseconds(1500));
                       ::kill(pid, SIGTERM);  // the shell's group: sh and the launcher
                     });
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.code, 128 + SIGTERM) << r.output;
  EXPECT_LT(r.seconds, 10.0);
}

TEST(Faults, RankKilledUnderMpirunEndsTheJobInSeconds) {
  if (::access("/usr/bin/mpirun", X_OK) != 0) GTEST_SKIP() << "mpirun (openmpi-bin) not installed";
  auto r = run_shell("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                     "OMPI_MCA_rmaps_base_oversubscribe=1 /usr/bin/mpirun -np 4 " + tripod_bin() +
                     " bench comm --check --check-sizes 1500001 --fault-kill-rank 2 "
                     "--fault-kill-after-ms 200 --distributed-timeout-minutes 10", 60);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_LT(r.seconds, 20.0);
}

// Ranks that disagree on a collective's size over Gloo: Gloo detects it on its
// event-loop thread, where nothing can catch it; the process must still end
// with a tripod error naming the collective, the group and both sizes, not
// with `terminate called` and exit 134.
TEST(Faults, SizeMismatchInACollectiveIsATripodErrorNotAnAbort) {
  // Gloo's own detection: on one host the collectives take shared memory
  // unless told not to (tests/cli/test_ipc_collectives.cpp checks that path).
  auto r = run_shell("TRIPOD_IPC_COLLECTIVES=0 " + tripod_bin() + " launch --nproc-per-node 2 bench comm --ops all_reduce --min-bytes 4096 "
                     "--max-bytes 4096 --iters 1 --warmup-iters 0 --fault-size-mismatch-rank 1" + kTimeout, 30);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_FALSE(contains(r.output, "terminate called")) << r.output;
  EXPECT_TRUE(contains(r.output, "failed: rank 0 exited with code 2")) << r.output;
  // Rank 0 posted 4096 bytes, rank 1 8192: bcube's first message is half the tensor.
  EXPECT_TRUE(contains(r.output, "a peer sent a message of 4096 bytes where this rank posted 2048 bytes")) << r.output;
  EXPECT_TRUE(contains(r.output, "in flight: global rank 0: all_reduce #1 on group world [0, 1] (4096 bytes)"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "start every rank with the same flags")) << r.output;
}

TEST(Faults, SizeMismatchInSendRecvUnderAHandLaunchNamesThePeer) {
  const std::string dir = temp_dir("mismatch");
  auto r = run_shell(manual_ranks(dir, 2, 0, 1, free_port(), {"t", "t"},
                                  " bench comm --ops sendrecv --min-bytes 4096 --max-bytes 4096 --iters 1 "
                                  "--warmup-iters 0 --fault-size-mismatch-rank 1" + kTimeout),
                     30);
  ASSERT_FALSE(r.timed_out);
  const std::string log0 = read_file(dir + "/r0.log"), log1 = read_file(dir + "/r1.log");
  EXPECT_EQ(code_of(dir, 0), 2) << log0;
  EXPECT_NE(code_of(dir, 1), 0) << log1;
  EXPECT_NE(code_of(dir, 1), 134) << log1;
  EXPECT_FALSE(contains(log0 + log1, "terminate called")) << log0 << log1;
  EXPECT_TRUE(contains(log0, "a peer sent a message of 8192 bytes where this rank posted 4096 bytes")) << log0;
  EXPECT_TRUE(contains(log0, "in flight: global rank 0: recv from global rank 1 (tag 0) on group world [0, 1] "
                             "(4096 bytes)")) << log0;
}
