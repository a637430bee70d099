// Which GPU each rank uses (cli/device.h assign_gpu): one GPU per rank, or
// ranks sharing GPUs with --distributed-backend gloo; NCCL with too few GPUs
// is an error that names the rehearsal mode.
#include <gtest/gtest.h>

#include "base/error.h"
#include "cli/device.h"

using namespace tripod;
using tripod::cli::assign_gpu;
using comm::CommBackend;

TEST(AssignGpu, OneGpuPerRankWhenThereAreEnough) {
  for (auto b : {CommBackend::Default, CommBackend::Nccl, CommBackend::Gloo})
    for (int r = 0; r < 4; ++r) {
      const auto a = assign_gpu(r, 4, 8, b);
      EXPECT_EQ(a.device, r);
      EXPECT_EQ(a.sharing, 1);
    }
}

TEST(AssignGpu, GlooRanksShareRoundRobin) {
  // 8 ranks on one GPU: all on cuda:0, 8 sharing.
  for (int r = 0; r < 8; ++r) {
    const auto a = assign_gpu(r, 8, 1, CommBackend::Gloo);
    EXPECT_EQ(a.device, 0);
    EXPECT_EQ(a.sharing, 8);
  }
  // 5 ranks on 2 GPUs: 0, 2, 4 on cuda:0 (3 sharing), 1, 3 on cuda:1 (2 sharing).
  for (int r = 0; r < 5; ++r) {
    const auto a = assign_gpu(r, 5, 2, CommBackend::Gloo);
    EXPECT_EQ(a.device, r % 2);
    EXPECT_EQ(a.sharing, r % 2 == 0 ? 3 : 2);
  }
}

TEST(AssignGpu, NcclWithTooFewGpusNamesTheRehearsalMode) {
  for (auto b : {CommBackend::Default, CommBackend::Nccl}) {
    try {
      assign_gpu(1, 2, 1, b);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      const std::string all = std::string(e.what()) + " " + e.hint();
      EXPECT_NE(all.find("2 ranks on this node but 1 CUDA device(s) visible"), std::string::npos) << all;
      EXPECT_NE(all.find("--distributed-backend gloo"), std::string::npos) << all;
    }
  }
  EXPECT_THROW(assign_gpu(0, 1, 0, CommBackend::Gloo), Error);  // no GPU at all
}

TEST(AssignGpu, BackendFlag) {
  EXPECT_EQ(cli::comm_backend_for("cuda", ""), CommBackend::Default);
  EXPECT_EQ(cli::comm_backend_for("cuda", "gloo"), CommBackend::Gloo);
  EXPECT_EQ(cli::comm_backend_for("cuda", "nccl"), CommBackend::Nccl);
  EXPECT_EQ(cli::comm_backend_for("cpu", "gloo"), CommBackend::Gloo);
  EXPECT_THROW(cli::comm_backend_for("cpu", "nccl"), Error);
  // tripod train rehearses a GPU script on CPU: nccl is Gloo there.
  EXPECT_EQ(cli::comm_backend_for("cpu", "nccl", true), CommBackend::Gloo);
  EXPECT_EQ(cli::comm_backend_for("cuda", "nccl", true), CommBackend::Nccl);
  EXPECT_THROW(cli::comm_backend_for("cuda", "mpi"), Error);
}
