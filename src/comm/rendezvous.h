// Rendezvous: who am I (rank, world size, local rank) and where is the
// bootstrap store, read from the environment that the launcher set.
//
// Relates to: comm/context.h (uses RankInfo to start the store and the
// communicators), launch/launch.h (`tripod launch` sets the tripod variables),
// docs/distributed.md (the table of variables per launcher).
//
// Launchers understood, first match wins:
//   tripod launch / torchrun : RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//                              MASTER_ADDR, MASTER_PORT (TRIPOD_LAUNCHER=tripod
//                              marks tripod's own launcher);
//                              TORCHELASTIC_USE_AGENT_STORE=True: the store at
//                              MASTER_ADDR:MASTER_PORT is torchrun's own
//                              (comm/torch_store.h)
//   Open MPI (mpirun)        : OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE
//   Slurm (srun)             : SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
//                              first host of SLURM_STEP_NODELIST/SLURM_NODELIST
// Nothing set: a single process (rank 0 of 1).
#pragma once

#include <map>
#include <string>

namespace tripod::comm {

struct RankInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string launcher = "none";  // "none", "torchrun", "slurm", "mpi", "tripod"
  // torchrun's agent already hosts a TCPStore on MASTER_ADDR:MASTER_PORT
  // (TORCHELASTIC_USE_AGENT_STORE=True: static rendezvous, and c10d in recent
  // PyTorch): every rank is a client of it; nobody hosts tripod's own store.
  bool agent_store = false;
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT: keys are per attempt
  // Shared by every rank of one job and by nobody else; the store refuses
  // connections that do not present it. See NOTE [Job token].
  std::string job_token;
};

// Reads the process environment. Throws Error naming the variable when a
// variable is missing, not a number, out of range, or two launchers disagree.
RankInfo resolve_rank_info();

// The same, over an explicit variable map (for tests).
RankInfo resolve_rank_info(const std::map<std::string, std::string>& env);

// First host name of a Slurm host list: "node[03-05,9],gpu1" -> "node03".
std::string slurm_first_host(const std::string& nodelist);

// NOTE [Job token]
// The token keeps a stray process of another job (same port, stale ranks of
// a restarted job) out of this job's store. It is not a password.
//   TRIPOD_JOB_TOKEN set        -> that value (tripod launch sets a random one;
//                                  set it yourself across nodes)
//   torchrun                    -> "torchrun:" + TORCHELASTIC_RUN_ID
//   Open MPI                    -> "mpi:" + OMPI_MCA_ess_base_jobid (or PMIX_NAMESPACE)
//   Slurm                       -> "slurm:" + SLURM_JOB_ID + "." + SLURM_STEP_ID
//   otherwise                   -> "tripod:" + MASTER_ADDR:MASTER_PORT + world size
std::string derive_job_token(const std::map<std::string, std::string>& env,
                             const std::string& launcher, const RankInfo& info);

// A snapshot of the process environment as a map.
std::map<std::string, std::string> environment_map();

}  // namespace tripod::comm
