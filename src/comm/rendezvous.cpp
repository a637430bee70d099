// Implementation of comm/rendezvous.h: one resolver for the launchers' variables.
#include "comm/rendezvous.h"

#include <unistd.h>

#include <cstdlib>
#include <functional>

#include "base/error.h"

extern char** environ;

namespace tripod::comm {

using Env = std::map<std::string, std::string>;

std::map<std::string, std::string> environment_map() {
  Env env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos && eq + 1 < kv.size()) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

namespace {

const std::string* find(const Env& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

int int_var(const Env& env, const char* name, const char* launcher) {
  const std::string* v = find(env, name);
  TRIPOD_CHECK_HINT(v, fmt::format("{} normally sets it; set {} yourself or start through the launcher",
                                   launcher, name),
                    "{} launch detected but {} is not set", launcher, name);
  char* end = nullptr;
  long x = std::strtol(v->c_str(), &end, 10);
  TRIPOD_CHECK(end && *end == '\0' && x >= 0, "environment variable {}='{}' is not a non-negative integer",
               name, *v);
  return int(x);
}

int int_var_or(const Env& env, const char* name, const char* launcher, int fallback) {
  return find(env, name) ? int_var(env, name, launcher) : fallback;
}

// A port all ranks of one job agree on when the launcher sets none, in
// [20000, 32768): below Linux's default ephemeral range (32768-60999), where
// the outgoing connections of other jobs on the host (their stores' clients,
// Gloo's pairs) take ports the kernel picks, so a derived port there could
// already be in use (seen: mpirun tests run side by side).
int derived_port(const std::string& job_id) {
  return 20000 + int(std::hash<std::string>{}(job_id) % 12768);
}

}  // namespace

std::string slurm_first_host(const std::string& nodelist) {
  // Host lists: "a,b", "node[01-04,07]", "rack1-n[1-2],gpu[3]". The first
  // host is the text up to the first top-level ',' with any bracket range
  // replaced by its first element.
  std::string out;
  for (size_t i = 0; i < nodelist.size(); ++i) {
    char c = nodelist[i];
    if (c == ',') break;
    if (c == '[') {
      size_t j = i + 1;
      while (j < nodelist.size() && nodelist[j] != '-' && nodelist[j] != ',' && nodelist[j] != ']')
        out += nodelist[j++];
      while (j < nodelist.size() && nodelist[j] != ']') ++j;
      i = j;
      continue;
    }
    out += c;
  }
  return out;
}

std::string derive_job_token(const Env& env, const std::string& launcher, const RankInfo& info) {
  if (auto* t = find(env, "TRIPOD_JOB_TOKEN")) return *t;
  if (launcher == "torchrun") {
    if (auto* id = find(env, "TORCHELASTIC_RUN_ID")) return "torchrun:" + *id;
  } else if (launcher == "mpi") {
    if (auto* id = find(env, "OMPI_MCA_ess_base_jobid")) return "mpi:" + *id;
    if (auto* id = find(env, "PMIX_NAMESPACE")) return "mpi:" + *id;
  } else if (launcher == "slurm") {
    const std::string* job = find(env, "SLURM_JOB_ID");
    const std::string* step = find(env, "SLURM_STEP_ID");
    if (job) return "slurm:" + *job + "." + (step ? *step : "0");
  }
  return fmt::format("tripod:{}:{}:{}", info.master_addr, info.master_port, info.world_size);
}

RankInfo resolve_rank_info() { return resolve_rank_info(environment_map()); }

RankInfo resolve_rank_info(const Env& env) {
  RankInfo info;
  const bool has_rank = find(env, "RANK") != nullptr;
  const bool has_ompi = find(env, "OMPI_COMM_WORLD_RANK") != nullptr;
  const bool has_slurm = find(env, "SLURM_PROCID") != nullptr && find(env, "SLURM_STEP_ID") != nullptr;

  if (has_rank) {
    const std::string* tl = find(env, "TRIPOD_LAUNCHER");
    info.launcher = tl && *tl == "tripod" ? "tripod" : "torchrun";
    const char* who = info.launcher == "tripod" ? "tripod launch" : "torchrun";
    info.rank = int_var(env, "RANK", who);
    info.world_size = int_var(env, "WORLD_SIZE", who);
    info.local_rank = int_var_or(env, "LOCAL_RANK", who, info.rank);
    info.local_world_size = int_var_or(env, "LOCAL_WORLD_SIZE", who, info.world_size);
    // A torchrun job inside mpirun would disagree with Open MPI's numbering.
    if (has_ompi) {
      int r = int_var(env, "OMPI_COMM_WORLD_RANK", "mpirun");
      TRIPOD_CHECK_HINT(r == info.rank, "start the ranks with one launcher only",
                        "RANK={} (from {}) disagrees with OMPI_COMM_WORLD_RANK={}", info.rank, who, r);
    }
    if (info.launcher == "torchrun") {
      const std::string* a = find(env, "TORCHELASTIC_USE_AGENT_STORE");
      info.agent_store = a && (*a == "True" || *a == "true" || *a == "1");
      info.restart_count = int_var_or(env, "TORCHELASTIC_RESTART_COUNT", who, 0);
    }
    if (info.world_size > 1) {
      TRIPOD_CHECK_HINT(find(env, "MASTER_ADDR") && find(env, "MASTER_PORT"),
                        "export MASTER_ADDR (rank 0's host) and MASTER_PORT (a free port)",
                        "RANK/WORLD_SIZE are set but MASTER_ADDR or MASTER_PORT is missing");
    }
  } else if (has_ompi) {
    info.launcher = "mpi";
    info.rank = int_var(env, "OMPI_COMM_WORLD_RANK", "mpirun");
    info.world_size = int_var(env, "OMPI_COMM_WORLD_SIZE", "mpirun");
    info.local_rank = int_var_or(env, "OMPI_COMM_WORLD_LOCAL_RANK", "mpirun", 0);
    info.local_world_size = int_var_or(env, "OMPI_COMM_WORLD_LOCAL_SIZE", "mpirun", 1);
    TRIPOD_CHECK_HINT(find(env, "MASTER_ADDR") || info.local_world_size == info.world_size,
                      "pass rank 0's host: mpirun -x MASTER_ADDR=<host> ...",
                      "mpirun over several nodes ({} ranks, {} on this node) needs MASTER_ADDR",
                      info.world_size, info.local_world_size);
  } else if (has_slurm) {
    info.launcher = "slurm";
    info.rank = int_var(env, "SLURM_PROCID", "srun");
    info.world_size = int_var(env, "SLURM_NTASKS", "srun");
    info.local_rank = int_var_or(env, "SLURM_LOCALID", "srun", 0);
    info.local_world_size = int_var_or(env, "SLURM_NTASKS_PER_NODE", "srun", 0);
    if (info.local_world_size == 0) {
      // SLURM_TASKS_PER_NODE reads like "4(x2)" or "3,2"; this node's count
      // is not needed by tripod beyond GPU selection, so take the first.
      const std::string* t = find(env, "SLURM_TASKS_PER_NODE");
      info.local_world_size = t ? std::atoi(t->c_str()) : 1;
      if (info.local_world_size <= 0) info.local_world_size = 1;
    }
    const std::string* nodes = find(env, "SLURM_STEP_NODELIST");
    if (!nodes) nodes = find(env, "SLURM_NODELIST");
    if (!find(env, "MASTER_ADDR")) {
      TRIPOD_CHECK_HINT(nodes, "export MASTER_ADDR=<first node>",
                        "srun launch without SLURM_STEP_NODELIST/SLURM_NODELIST or MASTER_ADDR");
      info.master_addr = slurm_first_host(*nodes);
    }
  }

  if (auto* a = find(env, "MASTER_ADDR")) info.master_addr = *a;
  if (find(env, "MASTER_PORT")) {
    info.master_port = int_var(env, "MASTER_PORT", "the launcher");
  } else if (info.launcher == "mpi") {
    const std::string* id = find(env, "OMPI_MCA_ess_base_jobid");
    if (!id) id = find(env, "PMIX_NAMESPACE");
    if (id) info.master_port = derived_port(*id);
  } else if (info.launcher == "slurm") {
    const std::string* job = find(env, "SLURM_JOB_ID");
    const std::string* step = find(env, "SLURM_STEP_ID");
    if (job) info.master_port = derived_port(*job + "." + (step ? *step : ""));
  }

  TRIPOD_CHECK(info.world_size >= 1, "world size must be >= 1, got {} (launcher {})", info.world_size,
               info.launcher);
  TRIPOD_CHECK(info.rank < info.world_size, "rank {} is outside the world of {} ranks (launcher {})",
               info.rank, info.world_size, info.launcher);
  TRIPOD_CHECK(info.local_rank < info.local_world_size || info.launcher == "slurm",
               "local rank {} is outside the {} local ranks (launcher {})", info.local_rank,
               info.local_world_size, info.launcher);
  TRIPOD_CHECK(info.master_port > 0 && info.master_port < 65536, "MASTER_PORT {} is not a TCP port",
               info.master_port);
  info.job_token = derive_job_token(env, info.launcher, info);
  return info;
}

}  // namespace tripod::comm
