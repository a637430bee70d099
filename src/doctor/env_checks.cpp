// Launch-environment checks: NCCL variables, MASTER_ADDR, reachability of
// the rendezvous port. See doctor/checks.h; docs/doctor.md for the table of
// symptoms each one prevents.
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "doctor/checks.h"

namespace tripod::doctor {
namespace {

std::optional<std::string> lookup(const EnvMap& env, const std::string& key) {
  auto it = env.find(key);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "(none)" : s;
}

int to_int(const std::string& s, int fallback) {
  try {
    size_t pos = 0;
    const int v = std::stoi(s, &pos);
    return pos == s.size() ? v : fallback;
  } catch (...) {
    return fallback;
  }
}

}  // namespace

std::vector<std::string> list_interfaces() {
  std::set<std::string> names;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a; a = a->ifa_next)
      if (a->ifa_name) names.insert(a->ifa_name);
    freeifaddrs(list);
  }
  return {names.begin(), names.end()};
}

CheckResult check_socket_ifname(const EnvMap& env, const std::vector<std::string>& interfaces) {
  CheckResult r{"nccl-socket-ifname", Status::kPass, "", ""};
  const auto v = lookup(env, "NCCL_SOCKET_IFNAME");
  if (!v) {
    r.status = Status::kInfo;
    r.finding = fmt::format("NCCL_SOCKET_IFNAME not set (NCCL picks an interface; here: {})", join(interfaces));
    r.fix = "on multi-node jobs set NCCL_SOCKET_IFNAME to the interface that reaches the other nodes "
            "(e.g. ib0 or eth0)";
    return r;
  }
  std::string spec = *v;
  const bool exclude = !spec.empty() && spec[0] == '^';
  if (exclude) spec = spec.substr(1);
  const bool exact = !spec.empty() && spec[0] == '=';
  if (exact) spec = spec.substr(1);
  auto matches = [&](const std::string& pattern, const std::string& name) {
    return exact ? name == pattern : name.rfind(pattern, 0) == 0;
  };
  std::vector<std::string> used;
  for (const auto& name : interfaces) {
    bool hit = false;
    for (const auto& p : split(spec, ',')) hit |= matches(p, name);
    if (hit != exclude) used.push_back(name);
  }
  if (exclude) used.erase(std::remove(used.begin(), used.end(), "lo"), used.end());
  if (used.empty()) {
    r.status = Status::kFail;
    r.finding = fmt::format("NCCL_SOCKET_IFNAME={} matches no interface of this machine (interfaces: {})", *v,
                            join(interfaces));
    r.fix = "set NCCL_SOCKET_IFNAME to one of the interfaces listed (as `ip addr` shows them), or unset it";
    return r;
  }
  r.finding = fmt::format("NCCL_SOCKET_IFNAME={} -> {}", *v, join(used));
  if (!exclude && used.size() == 1 && used[0] == "lo" && job_nnodes(env) > 1) {
    r.status = Status::kFail;
    r.fix = "the loopback interface cannot reach other nodes: name the network interface instead";
  }
  return r;
}

CheckResult check_ib_disable(const EnvMap& env, bool ib_devices_present) {
  CheckResult r{"nccl-ib", Status::kPass, "", ""};
  const auto v = lookup(env, "NCCL_IB_DISABLE");
  const bool disabled = v && *v != "0";
  if (disabled && ib_devices_present) {
    r.status = Status::kWarn;
    r.finding = fmt::format("NCCL_IB_DISABLE={} but InfiniBand devices are present: inter-node traffic goes over "
                            "TCP sockets",
                            *v);
    r.fix = "unset NCCL_IB_DISABLE (or set it to 0) to use InfiniBand/RoCE";
  } else if (disabled) {
    r.finding = fmt::format("NCCL_IB_DISABLE={} (no InfiniBand device here)", *v);
  } else if (ib_devices_present) {
    r.finding = "InfiniBand devices present, IB enabled";
  } else {
    r.status = Status::kInfo;
    r.finding = "no InfiniBand device; NCCL uses TCP sockets between nodes";
    r.fix = job_nnodes(env) > 1 ? "if NCCL stalls probing IB, set NCCL_IB_DISABLE=1" : "";
  }
  return r;
}

CheckResult check_nccl_debug(const EnvMap& env) {
  CheckResult r{"nccl-debug", Status::kPass, "", ""};
  const auto v = lookup(env, "NCCL_DEBUG");
  std::string up = v.value_or("");
  std::transform(up.begin(), up.end(), up.begin(), ::toupper);
  if (up == "INFO" || up == "TRACE") {
    r.status = Status::kWarn;
    r.finding = fmt::format("NCCL_DEBUG={} is on", *v);
    r.fix = "unset NCCL_DEBUG (or NCCL_DEBUG=WARN) for production runs; keep INFO for debugging a hang only";
  } else {
    r.finding = v ? fmt::format("NCCL_DEBUG={}", *v) : "NCCL_DEBUG not set";
  }
  return r;
}

int job_nnodes(const EnvMap& env) {
  for (const char* key : {"NNODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES", "PET_NNODES"})
    if (auto v = lookup(env, key)) {
      // torchrun accepts "1:4" (elastic min:max); the max counts.
      const auto parts = split(*v, ':');
      const int n = to_int(parts.empty() ? *v : parts.back(), 1);
      if (n > 1) return n;
    }
  const auto world = lookup(env, "WORLD_SIZE"), local = lookup(env, "LOCAL_WORLD_SIZE");
  if (world && local) {
    const int w = to_int(*world, 1), l = to_int(*local, 1);
    if (l > 0 && w > l) return (w + l - 1) / l;
  }
  return 1;
}

bool is_loopback_address(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr == "ip6-localhost" || addr.rfind("127.", 0) == 0;
}

CheckResult check_master_addr(const EnvMap& env) {
  CheckResult r{"master-addr", Status::kPass, "", ""};
  const auto addr = lookup(env, "MASTER_ADDR");
  const int nnodes = job_nnodes(env);
  if (!addr) {
    r.status = Status::kInfo;
    r.finding = fmt::format("MASTER_ADDR not set ({} node{})", nnodes, nnodes > 1 ? "s" : "");
    if (nnodes > 1) r.fix = "set MASTER_ADDR to the first node's address on every node (Slurm: srun sets it for "
                            "tripod from SLURM_NODELIST)";
    return r;
  }
  r.finding = fmt::format("MASTER_ADDR={}, {} node{}", *addr, nnodes, nnodes > 1 ? "s" : "");
  if (nnodes > 1 && is_loopback_address(*addr)) {
    r.status = Status::kFail;
    r.finding += ": a loopback address cannot be reached from the other nodes";
    r.fix = "set MASTER_ADDR to the IP or host name of node 0 (the same value on every node)";
  }
  return r;
}

CheckResult check_master_reachable(const EnvMap& env, int timeout_ms) {
  CheckResult r{"master-port", Status::kPass, "", ""};
  const auto addr = lookup(env, "MASTER_ADDR");
  const auto port = lookup(env, "MASTER_PORT");
  if (!addr || !port) {
    r.status = Status::kInfo;
    r.finding = "MASTER_ADDR/MASTER_PORT not set: nothing to reach";
    return r;
  }
  const std::string where = fmt::format("{}:{}", *addr, *port);
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (int e = getaddrinfo(addr->c_str(), port->c_str(), &hints, &res); e != 0) {
    r.status = Status::kFail;
    r.finding = fmt::format("{}: cannot resolve ({})", where, gai_strerror(e));
    r.fix = "use an IP address, or a host name every node resolves (check /etc/hosts and DNS)";
    return r;
  }
  int err = ETIMEDOUT;
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    err = rc == 0 ? 0 : errno;
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, timeout_ms);
      if (rc == 0) err = ETIMEDOUT;
      else {
        socklen_t len = sizeof(err);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      }
    }
    ::close(fd);
    if (err == 0 || err == ECONNREFUSED) break;
  }
  freeaddrinfo(res);
  if (err == 0) {
    r.finding = fmt::format("{} accepts TCP connections", where);
  } else if (err == ECONNREFUSED) {
    r.status = Status::kInfo;
    r.finding = fmt::format("{}: host answers, nothing listens on the port yet", where);
    r.fix = "fine before launch (rank 0 listens there once the job starts); during a job, rank 0 is not up";
  } else if (err == ETIMEDOUT) {
    r.status = Status::kFail;
    r.finding = fmt::format("{}: no answer within {} ms", where, timeout_ms);
    r.fix = fmt::format("check the address and that a firewall lets TCP port {} through (`nc -zv {} {}`)", *port,
                        *addr, *port);
  } else {
    r.status = Status::kFail;
    r.finding = fmt::format("{}: {}", where, std::strerror(err));
    r.fix = "check MASTER_ADDR (routing) and MASTER_PORT";
  }
  return r;
}

}  // namespace tripod::doctor
