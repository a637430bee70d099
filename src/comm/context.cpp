// Implementation of comm/context.h: store start-up, join, groups.
#include "comm/context.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "base/debug_config.h"
#include "base/env.h"
#include "base/error.h"
#include "base/log.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/local_communicator.h"
#include "comm/ipc/ipc_communicator.h"
#include "comm/staged/staged_communicator.h"
#include "comm/tcp_store.h"
#include "comm/torch_store.h"

namespace tripod::comm {

namespace {

struct Registry {
  std::mutex mu;
  std::map<DeviceType, CommFactory> factories;
  std::map<DeviceType, DeviceCopy> copies;
};
Registry& registry() {
  static Registry r;
  return r;
}

std::string hostname() {
  char buf[256] = "?";
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

bool is_loopback(const std::string& a) {
  return a == "localhost" || a.rfind("127.", 0) == 0 || a == "::1";
}

}  // namespace

bool register_comm_factory(DeviceType device, CommFactory factory) {
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().factories[device] = std::move(factory);
  return true;
}

bool register_device_copy(DeviceType device, DeviceCopy copy) {
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().copies[device] = std::move(copy);
  return true;
}

static DeviceCopy device_copy(DeviceType device) {
  std::lock_guard<std::mutex> lock(registry().mu);
  auto it = registry().copies.find(device);
  return it == registry().copies.end() ? DeviceCopy{} : it->second;
}

bool has_comm_factory(DeviceType device) {
  std::lock_guard<std::mutex> lock(registry().mu);
  return registry().factories.count(device) > 0;
}

CommBackend parse_comm_backend(const std::string& name) {
  if (name == "nccl") return CommBackend::Nccl;
  if (name == "gloo") return CommBackend::Gloo;
  TRIPOD_CHECK_HINT(false, "use --distributed-backend nccl (GPU default) or gloo",
                    "unknown --distributed-backend '{}'", name);
  return CommBackend::Default;
}

std::string comm_backend_name(DeviceType device, CommBackend backend) {
  if (device == DeviceType::CPU) return "Gloo";
  return backend == CommBackend::Gloo ? "Gloo (host-staged)" : "NCCL";
}

std::string GroupSpec::describe() const {
  std::string s = name + " [";
  for (size_t i = 0; i < global_ranks.size(); ++i)
    s += (i ? ", " : "") + std::to_string(global_ranks[i]);
  return s + "]";
}

std::unique_ptr<DistContext> DistContext::init(const RankInfo& info, DeviceType comm_device,
                                               std::chrono::milliseconds timeout, CommBackend backend) {
  TRIPOD_CHECK(info.world_size >= 1 && info.rank >= 0 && info.rank < info.world_size,
               "rank {} is outside the world of {} ranks", info.rank, info.world_size);
  if (info.world_size == 1) {
    std::unique_ptr<DistContext> ctx(new DistContext());
    ctx->device_ = comm_device;
    ctx->config_.backend = backend;
    ctx->config_.timeout = timeout;
    ctx->config_.recorder = std::make_shared<FlightRecorder>();
    ctx->world_ = std::make_shared<LocalCommunicator>("world", 0, device_copy(comm_device), ctx->config_.device_stream);
    return ctx;
  }
  const std::string token =
      info.job_token.empty() ? derive_job_token(environment_map(), info.launcher, info) : info.job_token;
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<Store> store;
  std::string local_addr = "127.0.0.1";
  const std::string init_method = env::get_or("TRIPOD_INIT_METHOD", "");
  std::string endpoint;
  if (init_method.rfind("file://", 0) == 0) {
    store = std::make_shared<FileStore>(init_method.substr(7), timeout);
    endpoint = init_method;
    if (auto a = env::get("TRIPOD_LOCAL_ADDR")) local_addr = *a;
    else if (info.local_world_size != info.world_size) local_addr = hostname();
  } else {
    TRIPOD_CHECK_HINT(init_method.empty(), "use file:///shared/dir or leave it unset (TCP store)",
                      "TRIPOD_INIT_METHOD='{}' is not understood", init_method);
    std::shared_ptr<Store> client;
    std::string client_addr, client_endpoint;
    if (info.agent_store) {
      // torchrun's agent holds MASTER_PORT: use its store, one namespace per
      // job and restart attempt (as torch.distributed's workers do).
      auto agent = std::make_shared<TorchAgentStore>(
          info.master_addr, info.master_port,
          fmt::format("/tripod/{}/attempt_{}/", token, info.restart_count), info.rank, timeout);
      if (info.rank == 0)
        log::info("distributed: torchrun's agent hosts the store at {} (PyTorch TCPStore, {} protocol)",
                  agent->endpoint(), TorchAgentStore::protocol_name(agent->protocol()));
      client_addr = agent->local_address();
      client_endpoint = agent->endpoint() + " (torchrun's agent store)";
      client = agent;
    } else {
      if (info.rank == 0) server = std::make_unique<TcpStoreServer>(info.master_port, token);
      auto tcp = std::make_shared<TcpStore>(info.master_addr, info.master_port, token, info.rank, timeout);
      client_addr = tcp->local_address();
      client_endpoint = tcp->endpoint();
      client = tcp;
    }
    // Gloo listens on the address this host used to reach the store: one
    // that the store's host, hence usually every node, can reach.
    if (!is_loopback(info.master_addr)) local_addr = client_addr;
    if (auto a = env::get("TRIPOD_LOCAL_ADDR")) local_addr = *a;
    else if (is_loopback(local_addr) && info.local_world_size < info.world_size)
      log::warn("rank {}: this job spans nodes ({} of {} ranks here) but this rank's address is {} "
                "(MASTER_ADDR {}); other nodes cannot reach it. Set TRIPOD_LOCAL_ADDR to this "
                "node's address, or MASTER_ADDR to rank 0's routable address",
                info.rank, info.local_world_size, info.world_size, local_addr, info.master_addr);
    endpoint = client_endpoint;
    store = client;
  }
  std::unique_ptr<DistContext> ctx(new DistContext());
  ctx->config_.local_rank = info.local_rank;
  ctx->config_.backend = backend;
  ctx->config_.local_addr = local_addr;
  ctx->endpoint_ = endpoint;
  ctx->server_ = std::move(server);
  const auto t0 = std::chrono::steady_clock::now();
  ctx->start(info.rank, info.world_size, store, comm_device, timeout);
  if (info.rank == 0)
    log::info("distributed: {} ranks joined at {} (launcher {}, {} communicators{}) in {:.2f} s",
              info.world_size, endpoint, info.launcher, comm_backend_name(comm_device, backend),
              ctx->world_ && is_ipc_communicator(*ctx->world_)
                  ? "; collectives through shared memory, TRIPOD_IPC_COLLECTIVES=0 for Gloo only"
                  : "",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return ctx;
}

std::unique_ptr<DistContext> DistContext::init_with_store(int rank, int world_size,
                                                          std::shared_ptr<Store> store,
                                                          DeviceType comm_device,
                                                          std::chrono::milliseconds timeout,
                                                          int local_rank, CommBackend backend) {
  std::unique_ptr<DistContext> ctx(new DistContext());
  ctx->config_.backend = backend;
  ctx->config_.local_addr = "127.0.0.1";
  ctx->config_.local_rank = local_rank >= 0 ? local_rank : rank;
  ctx->endpoint_ = "the in-process store";
  ctx->start(rank, world_size, std::move(store), comm_device, timeout);
  return ctx;
}

void DistContext::start(int rank, int world_size, std::shared_ptr<Store> store, DeviceType comm_device,
                        std::chrono::milliseconds timeout) {
  rank_ = rank;
  world_size_ = world_size;
  device_ = comm_device;
  store_ = std::move(store);
  config_.timeout = timeout;
  config_.recorder = std::make_shared<FlightRecorder>();
  if (world_size == 1) {
    world_ = std::make_shared<LocalCommunicator>("world", rank, device_copy(comm_device), config_.device_stream);
    return;
  }
  if (config_.backend == CommBackend::Gloo && comm_device != DeviceType::CPU)
    TRIPOD_CHECK_HINT(has_staging_device(comm_device), "rebuild with -DTRIPOD_CUDA=ON",
                      "no host staging for {} tensors in this build (--distributed-backend gloo)",
                      comm_device == DeviceType::CUDA ? "CUDA" : "this device's");
  else
    TRIPOD_CHECK(comm_device == DeviceType::CPU || has_comm_factory(comm_device),
                 "no communicator for {} tensors in this build",
                 comm_device == DeviceType::CUDA ? "CUDA (NCCL)" : "this device");
  join_world();
  std::vector<int> all(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) all[size_t(r)] = r;
  world_ = new_group({all}, "world");
}

// NOTE [Rank claims]: each rank first claims its number (an add on
// "join/claim/<rank>"); a second claim of a number is a process started with
// the same RANK (a stray of another job with the same MASTER_PORT, WORLD_SIZE
// and job token, or a launcher that started a rank twice): it is refused,
// naming both processes, and the job goes on. A claim whose holder is a dead
// process on this host is taken over (a rank restarted by hand while the
// others wait): true then, and the rank is not counted again.
bool DistContext::claim_rank(const std::string& me) {
  Store& s = *store_;
  const std::string key = "join/rank/" + std::to_string(rank_);
  if (s.add("join/claim/" + std::to_string(rank_), 1) == 1) return false;
  std::string holder = "(not recorded yet)";
  try {
    holder = s.get_str(key, Millis{5000});
  } catch (const std::exception&) {
  }
  // "<host> pid <pid> world <n>": a dead process on this host gives its claim up.
  const auto at = holder.find(" pid ");
  if (at != std::string::npos && holder.substr(0, at) == hostname()) {
    const int64_t pid = std::atoll(holder.c_str() + at + 5);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      log::warn("rank {}: took over rank {} of the rendezvous at {} from {}, which is no longer running", rank_,
                rank_, endpoint_, holder);
      return true;
    }
  }
  throw Error(fmt::format("rank {}: the rendezvous at {} already has a rank {} ({}); this process ({}) was refused: "
                          "two processes were started with RANK={}", rank_, endpoint_, rank_, holder, me, rank_),
              "a process of another job with the same MASTER_PORT and WORLD_SIZE, or a rank started twice: give "
              "each job its own MASTER_PORT, or set TRIPOD_JOB_TOKEN to a value of its own in each job (torchrun's "
              "run id is used when set) so that other jobs' processes are refused when they connect");
}

void DistContext::join_world() {
  Store& s = *store_;
  const std::string me = fmt::format("{} pid {} world {}", hostname(), ::getpid(), world_size_);
  const bool took_over = claim_rank(me);
  s.set_str("join/rank/" + std::to_string(rank_), me);
  const int64_t n = s.add("join/count", took_over ? 0 : 1);
  if (n == world_size_ && !took_over) s.set_str("join/done", "1");
  TRIPOD_CHECK_HINT(n <= world_size_, "every rank must be started with the same WORLD_SIZE",
                    "rank {}: {} ranks joined the rendezvous at {} but the world size is {}", rank_,
                    n, endpoint_, world_size_);
  // The first rank to time out publishes the verdict in "join/done", so every
  // joined rank reports the same missing ranks; each reads it before it acks,
  // and the store's host stays until every joined rank has acked (bounded),
  // so that none of them loses the store before it has the reason.
  std::string verdict;
  try {
    s.wait({"join/done"}, config_.timeout);
    verdict = s.get_str("join/done");
  } catch (const TimeoutError&) {
    std::string missing, joined;
    for (int r = 0; r < world_size_; ++r) {
      std::string& list = s.check({"join/rank/" + std::to_string(r)}) ? joined : missing;
      list += (list.empty() ? "" : ", ") + std::to_string(r);
    }
    verdict = fmt::format("missing [{}] joined [{}]", missing, joined);
    s.set_str("join/done", verdict);
  }
  if (verdict == "1") {
    const std::string first = s.get_str("join/rank/0");
    TRIPOD_CHECK_HINT(first.substr(first.rfind(' ') + 1) == me.substr(me.rfind(' ') + 1),
                      "every rank must be started with the same WORLD_SIZE",
                      "rank {} and rank 0 disagree on the world size ({} vs {})", rank_, me, first);
    return;
  }
  const auto lb = verdict.find('['), rb = verdict.find(']'), lb2 = verdict.rfind('['), rb2 = verdict.rfind(']');
  const std::string missing = verdict.substr(lb + 1, rb - lb - 1), joined = verdict.substr(lb2 + 1, rb2 - lb2 - 1);
  try {
    if (server_) {
      const int64_t peers = std::count(joined.begin(), joined.end(), ',');  // joined ranks other than this one
      const auto until = std::chrono::steady_clock::now() + std::clamp(config_.timeout, Millis{10000}, Millis{30000});
      while (std::chrono::steady_clock::now() < until && s.add("join/acks", 0) < peers)
        std::this_thread::sleep_for(Millis{20});
    } else {
      s.add("join/acks", 1);
    }
  } catch (const std::exception&) {  // the verdict is already read: report it
  }
  throw TimeoutError(fmt::format("rank {}: timed out after {:.1f} s waiting for the other ranks to join the "
                                 "rendezvous at {}: rank(s) [{}] never joined (joined: {})",
                                 rank_, config_.timeout.count() / 1e3, endpoint_, missing, joined),
                     "those ranks never started, crashed before initialising, or cannot reach "
                     "MASTER_ADDR:MASTER_PORT; look at their output");
}

std::shared_ptr<Communicator> make_device_communicator(DeviceType device, const GroupSpec& spec,
                                                       std::shared_ptr<Store> store,
                                                       const CommConfig& config) {
  // NOTE [IPC collectives]: ranks that share one memory skip the transport.
  using Ipc = DebugConfig::IpcCollectives;
  const Ipc ipc_mode = debug_config().ipc_collectives;
  if (device == DeviceType::CPU) {
    auto gloo = make_gloo_communicator(spec, store, config);
    return ipc_mode != Ipc::kOff ? make_ipc_communicator(spec, std::move(store), config, std::move(gloo), make_ipc_device(device, config))
               : gloo;
  }
  if (config.backend == CommBackend::Gloo) {  // NOTE [Host-staged collectives]
    auto staged = make_staged_communicator(make_gloo_communicator(spec, store, config),
                                           make_staging_device(device, config));
    return ipc_mode == Ipc::kOn ? make_ipc_communicator(spec, std::move(store), config, std::move(staged),
                                       make_ipc_device(device, config))
               : staged;
  }
  CommFactory f;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    auto it = registry().factories.find(device);
    TRIPOD_CHECK_HINT(it != registry().factories.end(), "rebuild with -DTRIPOD_CUDA=ON (NCCL)",
                      "this tripod build has no GPU communicator");
    f = it->second;
  }
  return f(spec, std::move(store), config);
}

std::shared_ptr<Communicator> DistContext::make_comm(const GroupSpec& spec, const std::string& prefix) {
  return make_device_communicator(device_, spec, std::make_shared<PrefixStore>(prefix, store_), config_);
}

std::shared_ptr<Communicator> DistContext::new_group(const std::vector<std::vector<int>>& groups,
                                                     const std::string& name) {
  ++groups_made_;
  std::set<int> seen;
  int mine = -1;
  for (size_t g = 0; g < groups.size(); ++g) {
    TRIPOD_CHECK(!groups[g].empty(), "new_group '{}': group {} is empty", name, g);
    for (int r : groups[g]) {
      TRIPOD_CHECK(r >= 0 && r < world_size_, "new_group '{}': rank {} is outside the world of {}",
                   name, r, world_size_);
      TRIPOD_CHECK(seen.insert(r).second, "new_group '{}': rank {} is in two groups", name, r);
      if (r == rank_) mine = int(g);
    }
  }
  if (mine < 0) return nullptr;
  const auto& members = groups[size_t(mine)];
  GroupSpec spec;
  spec.name = name;
  spec.global_ranks = members;
  spec.global_rank = rank_;
  spec.group_rank = int(std::find(members.begin(), members.end(), rank_) - members.begin());
  std::shared_ptr<Communicator> comm;
  if (members.size() == 1)
    comm = std::make_shared<LocalCommunicator>(name, rank_, device_copy(device_), config_.device_stream);
  else comm = make_comm(spec, fmt::format("group/{}/{}/{}/", groups_made_, name, mine));
  comms_.push_back(comm);
  return comm;
}

void DistContext::abort() noexcept {
  aborted_ = true;
  for (auto& w : comms_)
    if (auto c = w.lock()) c->abort();
}

DistContext::~DistContext() {
  // Rank 0 hosts the store: keep it up until every rank has left, so a rank
  // still connecting a group's mesh never loses it. Skipped when failing.
  if (store_ && world_size_ > 1 && !aborted_ && std::uncaught_exceptions() == 0) {
    try {
      const int64_t n = store_->add("leave/count", 1);
      if (n == world_size_) store_->set_str("leave/done", "1");
      if (server_) store_->wait({"leave/done"}, std::min<Millis>(config_.timeout, Millis{60000}));
    } catch (const std::exception& e) {
      log::warn("rank {}: leaving the rendezvous: {}", rank_, e.what());
    }
  }
  world_.reset();
  comms_.clear();
  store_.reset();
  server_.reset();
}

}  // namespace tripod::comm
