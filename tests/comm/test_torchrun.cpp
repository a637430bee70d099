// torchrun's rendezvous forms with a fixed master port, as Megatron job
// scripts use them: static (--master_addr/--master_port, --nnodes N
// --node_rank i) and c10d (--rdzv_backend c10d --rdzv_endpoint), on one node
// and as two "nodes" on this machine. Under the static form torchrun's agent
// already hosts a TCPStore on MASTER_PORT; tripod's ranks must use it
// (comm/torch_store.h) instead of failing to bind the port.
#include <gtest/gtest.h>

#include "proc_util.h"

using namespace tripod::testing;

namespace {

const char* kTorchrun = "/usr/bin/torchrun";
// Debian's torchrun (1.13, Python 3.11) crashes with --redirects 0.
const std::string kRedirects = " --redirects 1 --tee 1 ";

std::string check_cmd(int tp) {
  return " --no_python " + tripod_bin() + " bench comm --check --tensor-model-parallel-size " +
         std::to_string(tp) + " --check-sizes 1 1000 65539";
}

void expect_passed(const RunResult& r, const std::string& world) {
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "comm check passed: world " + world)) << r.output;
  // (torchrun's own c10d agents may log a failed bind of the rendezvous
  // endpoint when two of them share a machine; that is not tripod's store.)
  EXPECT_FALSE(contains(r.output, "cannot host the rendezvous store")) << r.output;
}

}  // namespace

TEST(Torchrun, OneNodeStaticFixedPort) {
  if (::access(kTorchrun, X_OK) != 0) GTEST_SKIP() << "torchrun (python3-torch) not installed";
  const int port = free_port();
  auto r = run_shell("cd " + temp_dir("tr_static") + " && " + kTorchrun + kRedirects +
                         "--nproc_per_node 4 --nnodes 1 --node_rank 0 --master_addr localhost "
                         "--master_port " + std::to_string(port) + check_cmd(2),
                     180);
  expect_passed(r, "4 = tp 2 x dp 2 x pp 1");
  EXPECT_TRUE(contains(r.output, "torchrun's agent hosts the store at localhost:" + std::to_string(port)))
      << r.output;
}

TEST(Torchrun, OneNodeC10dFixedPort) {
  if (::access(kTorchrun, X_OK) != 0) GTEST_SKIP() << "torchrun (python3-torch) not installed";
  const int port = free_port();
  auto r = run_shell("cd " + temp_dir("tr_c10d") + " && " + kTorchrun + kRedirects +
                         "--nproc_per_node 4 --nnodes 1 --rdzv_backend c10d --rdzv_endpoint localhost:" +
                         std::to_string(port) + check_cmd(2),
                     180);
  expect_passed(r, "4 = tp 2 x dp 2 x pp 1");
}

// Two agents on this machine stand for two nodes of 2 GPUs each.
TEST(TorchrunTwoNodes, StaticFixedPort) {
  if (::access(kTorchrun, X_OK) != 0) GTEST_SKIP() << "torchrun (python3-torch) not installed";
  const int port = free_port();
  const std::string common = std::string(kTorchrun) + kRedirects +
                             "--nproc_per_node 2 --nnodes 2 --master_addr 127.0.0.1 --master_port " +
                             std::to_string(port);
  auto r = run_shell("cd " + temp_dir("tr_static2") + " && (" + common + " --node_rank 1" + check_cmd(2) +
                         " > node1.txt 2>&1 &) && " + common + " --node_rank 0" + check_cmd(2) +
                         "; code=$?; sleep 2; cat node1.txt; exit $code",
                     300);
  expect_passed(r, "4 = tp 2 x dp 2 x pp 1");
}

TEST(TorchrunTwoNodes, C10dFixedPort) {
  if (::access(kTorchrun, X_OK) != 0) GTEST_SKIP() << "torchrun (python3-torch) not installed";
  const int port = free_port();
  const std::string common = std::string(kTorchrun) + kRedirects +
                             "--nproc_per_node 2 --nnodes 2 --rdzv_backend c10d --rdzv_id job7 "
                             "--rdzv_endpoint 127.0.0.1:" + std::to_string(port);
  auto r = run_shell("cd " + temp_dir("tr_c10d2") + " && (" + common + check_cmd(2) +
                         " > node1.txt 2>&1 &) && " + common + check_cmd(2) +
                         "; code=$?; sleep 2; cat node1.txt; exit $code",
                     300);
  expect_passed(r, "4 = tp 2 x dp 2 x pp 1");
}

// A Megatron job script runs twice with --load = --save: the first run finds
// no checkpoint and starts from scratch (a warning, not an error), stops at
// --exit-interval and saves; the second resumes there and finishes.
TEST(Torchrun, SameJobScriptStartsThenResumes) {
  if (::access(kTorchrun, X_OK) != 0) GTEST_SKIP() << "torchrun (python3-torch) not installed";
  const std::string dir = temp_dir("tr_resume");
  const std::string script =
      "cd " + dir + " && " + kTorchrun + kRedirects + "--nproc_per_node 2 --nnodes 1 --node_rank 0 " +
      "--master_addr localhost --master_port " + std::to_string(free_port()) + " --no_python " + tripod_bin() +
      " train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data "
      "--vocab-size 128 --micro-batch-size 2 --train-iters 6 --lr 1e-3 --log-interval 1 --eval-interval 100 "
      "--exit-interval 3 --device cpu --save " + dir + "/ckpt --load " + dir + "/ckpt";
  auto first = run_shell(script, 300);
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_TRUE(contains(first.output, "no checkpoint to resume from (the directory does not exist yet); "
                                     "starting from scratch")) << first.output;
  EXPECT_TRUE(contains(first.output, "exiting after iteration 3 (--exit-interval 3)")) << first.output;
  auto second = run_shell(script, 300);
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_TRUE(contains(second.output, "loaded checkpoint " + dir + "/ckpt/iter_0000003")) << second.output;
  EXPECT_TRUE(contains(second.output, "iteration        6/       6")) << second.output;
  EXPECT_FALSE(contains(second.output, "iteration        3/       6")) << second.output;
  EXPECT_FALSE(contains(second.output, "starting from scratch")) << second.output;
  EXPECT_EQ(read_file(dir + "/ckpt/latest_checkpointed_iteration.txt"), "6\n");
}
