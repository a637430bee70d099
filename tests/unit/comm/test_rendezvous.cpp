// Rank discovery from each launcher's variables, conflicts and gaps.
#include <gtest/gtest.h>

#include "base/error.h"
#include "comm/rendezvous.h"

using namespace tripod;
using namespace tripod::comm;
using Env = std::map<std::string, std::string>;

static std::string error_of(const Env& env) {
  try {
    resolve_rank_info(env);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Rendezvous, NothingSetIsASingleProcess) {
  RankInfo i = resolve_rank_info(Env{});
  EXPECT_EQ(i.rank, 0);
  EXPECT_EQ(i.world_size, 1);
  EXPECT_EQ(i.launcher, "none");
}

TEST(Rendezvous, Torchrun) {
  Env env{{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
          {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29555"}, {"TORCHELASTIC_RUN_ID", "abc"}};
  RankInfo i = resolve_rank_info(env);
  EXPECT_EQ(i.launcher, "torchrun");
  EXPECT_EQ(i.rank, 5);
  EXPECT_EQ(i.world_size, 8);
  EXPECT_EQ(i.local_rank, 1);
  EXPECT_EQ(i.local_world_size, 4);
  EXPECT_EQ(i.master_addr, "node7");
  EXPECT_EQ(i.master_port, 29555);
  EXPECT_EQ(i.job_token, "torchrun:abc");
  env["TRIPOD_LAUNCHER"] = "tripod";
  env["TRIPOD_JOB_TOKEN"] = "t0k";
  i = resolve_rank_info(env);
  EXPECT_EQ(i.launcher, "tripod");
  EXPECT_EQ(i.job_token, "t0k");
}

TEST(Rendezvous, OpenMpi) {
  Env env{{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", "3"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
          {"OMPI_MCA_ess_base_jobid", "123456"}};
  RankInfo i = resolve_rank_info(env);
  EXPECT_EQ(i.launcher, "mpi");
  EXPECT_EQ(i.rank, 3);
  EXPECT_EQ(i.world_size, 4);
  EXPECT_EQ(i.master_addr, "127.0.0.1");
  EXPECT_EQ(i.job_token, "mpi:123456");
  // The derived port is the same for every rank of the job, in range:
  // below Linux's default ephemeral ports (32768-60999).
  env["OMPI_COMM_WORLD_RANK"] = "0";
  EXPECT_EQ(resolve_rank_info(env).master_port, i.master_port);
  for (const char* job : {"123456", "7", "987654321", "mpi-job-x"}) {
    env["OMPI_MCA_ess_base_jobid"] = job;
    const int port = resolve_rank_info(env).master_port;
    EXPECT_GE(port, 20000) << job;
    EXPECT_LT(port, 32768) << job;
  }
  env["OMPI_MCA_ess_base_jobid"] = "123456";
  // Several nodes need MASTER_ADDR.
  env["OMPI_COMM_WORLD_SIZE"] = "8";
  EXPECT_NE(error_of(env).find("MASTER_ADDR"), std::string::npos);
}

TEST(Rendezvous, Slurm) {
  Env env{{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "2"},
          {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_ID", "77"}, {"SLURM_TASKS_PER_NODE", "4(x2)"},
          {"SLURM_STEP_NODELIST", "gpu[03-04]"}};
  RankInfo i = resolve_rank_info(env);
  EXPECT_EQ(i.launcher, "slurm");
  EXPECT_EQ(i.rank, 6);
  EXPECT_EQ(i.world_size, 8);
  EXPECT_EQ(i.local_rank, 2);
  EXPECT_EQ(i.local_world_size, 4);
  EXPECT_EQ(i.master_addr, "gpu03");
  EXPECT_EQ(i.job_token, "slurm:77.0");
}

TEST(Rendezvous, SlurmHostLists) {
  EXPECT_EQ(slurm_first_host("node[03-05,9],gpu1"), "node03");
  EXPECT_EQ(slurm_first_host("a,b"), "a");
  EXPECT_EQ(slurm_first_host("rack1-n[7]"), "rack1-n7");
  EXPECT_EQ(slurm_first_host("single"), "single");
}

TEST(Rendezvous, ConflictsAndGapsAreNamed) {
  std::string e = error_of({{"RANK", "1"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}});
  EXPECT_NE(e.find("WORLD_SIZE"), std::string::npos) << e;
  e = error_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "0"},
                {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}});
  EXPECT_NE(e.find("disagrees"), std::string::npos) << e;
  e = error_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}});
  EXPECT_NE(e.find("outside"), std::string::npos) << e;
  e = error_of({{"RANK", "x"}, {"WORLD_SIZE", "4"}});
  EXPECT_NE(e.find("RANK='x'"), std::string::npos) << e;
  e = error_of({{"RANK", "0"}, {"WORLD_SIZE", "4"}});
  EXPECT_NE(e.find("MASTER_PORT"), std::string::npos) << e;
}
