// Each doctor check as a function of injected inputs: fake environment maps,
// fake /proc/meminfo text, fake `nvidia-smi topo -m` output, fake CUDA
// inventories; the TCP probe against loopback sockets of this test; the
// all-reduce sweep over two threads-as-ranks (Gloo over a HashStore).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "comm/context.h"
#include "comm/store.h"
#include "doctor/checks.h"
#include "doctor/comm_check.h"

namespace tripod::doctor {
namespace {

constexpr int64_t kGiB = 1ll << 30;

std::string meminfo(int64_t total_kb, int64_t avail_kb) {
  return "MemTotal:       " + std::to_string(total_kb) + " kB\nMemFree:          1000 kB\nMemAvailable:   " +
         std::to_string(avail_kb) + " kB\nBuffers:           10 kB\n";
}

TEST(DoctorHost, Meminfo) {
  const std::string m = meminfo(65536000, 32768000);
  EXPECT_EQ(meminfo_bytes(m, "MemTotal"), 65536000ll * 1024);
  EXPECT_EQ(meminfo_bytes(m, "MemAvailable"), 32768000ll * 1024);
  EXPECT_FALSE(meminfo_bytes(m, "SwapTotal").has_value());
}

TEST(DoctorHost, RamTwiceModel) {
  // 1.5e9 params x 4 B x 2 = 12e9 B = 11.2 GiB.
  const int64_t gib_kb = 1024 * 1024;
  EXPECT_EQ(check_host_ram(meminfo(64 * gib_kb, 60 * gib_kb), 1500000000).status, Status::kPass);
  EXPECT_EQ(check_host_ram(meminfo(8 * gib_kb, 8 * gib_kb), 1500000000).status, Status::kFail);
  EXPECT_EQ(check_host_ram(meminfo(64 * gib_kb, 8 * gib_kb), 1500000000).status, Status::kWarn);
  const CheckResult unknown = check_host_ram(meminfo(8 * gib_kb, 8 * gib_kb), 0);
  EXPECT_EQ(unknown.status, Status::kPass);
  EXPECT_NE(unknown.fix.find("--model-params"), std::string::npos);
  EXPECT_EQ(check_host_ram("garbage", 10).status, Status::kWarn);
}

TEST(DoctorHost, Shm) {
  EXPECT_EQ(check_shm(64ll << 20, true).status, Status::kWarn);  // Docker's default 64 MB
  EXPECT_NE(check_shm(64ll << 20, true).fix.find("--shm-size"), std::string::npos);
  EXPECT_EQ(check_shm(64 * kGiB, true).status, Status::kPass);
  EXPECT_EQ(check_shm(64ll << 20, false).status, Status::kPass);
  EXPECT_EQ(check_shm(std::nullopt, true).status, Status::kWarn);
}

TEST(DoctorHost, ContainerDetection) {
  EXPECT_TRUE(detect_container("0::/docker/3f2a9c\n", false, false, {}));
  EXPECT_TRUE(detect_container("12:pids:/kubepods/burstable/pod1\n", false, false, {}));
  EXPECT_FALSE(detect_container("0::/init.scope\n", false, false, {}));
  EXPECT_TRUE(detect_container("0::/\n", true, false, {}));
  EXPECT_TRUE(detect_container("0::/\n", false, false, {{"container", "podman"}}));
}

TEST(DoctorHost, SaveDir) {
  const CheckResult nfs = check_save_dir("/mnt/ckpt", 500 * kGiB, 0x6969, 0);
  EXPECT_EQ(nfs.status, Status::kWarn);
  EXPECT_NE(nfs.finding.find("nfs"), std::string::npos);
  EXPECT_EQ(check_save_dir("/ckpt", 500 * kGiB, 0xEF53, 0).status, Status::kPass);
  EXPECT_EQ(check_save_dir("/ckpt", 5 * kGiB, 0xEF53, 0).status, Status::kWarn);  // < 10 GiB
  // 1e9 params: 2 checkpoints x 12 B = 24 GB needed.
  EXPECT_EQ(check_save_dir("/ckpt", 20 * kGiB, 0x58465342, 24000000000).status, Status::kWarn);
  EXPECT_EQ(check_save_dir("/ckpt", 30 * kGiB, 0x58465342, 24000000000).status, Status::kPass);
  EXPECT_EQ(fs_name(0x58465342), "xfs");
}

TEST(DoctorEnv, SocketIfname) {
  const std::vector<std::string> ifs = {"docker0", "eth0", "ib0", "lo"};
  EXPECT_EQ(check_socket_ifname({}, ifs).status, Status::kInfo);
  EXPECT_EQ(check_socket_ifname({{"NCCL_SOCKET_IFNAME", "eth"}}, ifs).status, Status::kPass);  // prefix
  EXPECT_EQ(check_socket_ifname({{"NCCL_SOCKET_IFNAME", "ib0,eth1"}}, ifs).status, Status::kPass);
  const CheckResult bad = check_socket_ifname({{"NCCL_SOCKET_IFNAME", "enp1s0"}}, ifs);
  EXPECT_EQ(bad.status, Status::kFail);
  EXPECT_NE(bad.finding.find("eth0"), std::string::npos);  // lists what exists
  EXPECT_EQ(check_socket_ifname({{"NCCL_SOCKET_IFNAME", "=eth"}}, ifs).status, Status::kFail);  // exact
  EXPECT_EQ(check_socket_ifname({{"NCCL_SOCKET_IFNAME", "=eth0"}}, ifs).status, Status::kPass);
  const CheckResult ex = check_socket_ifname({{"NCCL_SOCKET_IFNAME", "^docker,lo"}}, ifs);
  EXPECT_EQ(ex.status, Status::kPass);
  EXPECT_NE(ex.finding.find("eth0, ib0"), std::string::npos);
  EXPECT_EQ(check_socket_ifname({{"NCCL_SOCKET_IFNAME", "lo"}, {"NNODES", "2"}}, ifs).status, Status::kFail);
}

TEST(DoctorEnv, IbAndDebug) {
  EXPECT_EQ(check_ib_disable({{"NCCL_IB_DISABLE", "1"}}, true).status, Status::kWarn);
  EXPECT_EQ(check_ib_disable({{"NCCL_IB_DISABLE", "1"}}, false).status, Status::kPass);
  EXPECT_EQ(check_ib_disable({}, true).status, Status::kPass);
  EXPECT_EQ(check_ib_disable({}, false).status, Status::kInfo);
  EXPECT_EQ(check_nccl_debug({{"NCCL_DEBUG", "INFO"}}).status, Status::kWarn);
  EXPECT_EQ(check_nccl_debug({{"NCCL_DEBUG", "trace"}}).status, Status::kWarn);
  EXPECT_EQ(check_nccl_debug({{"NCCL_DEBUG", "WARN"}}).status, Status::kPass);
  EXPECT_EQ(check_nccl_debug({}).status, Status::kPass);
}

TEST(DoctorEnv, NodesAndMasterAddr) {
  EXPECT_EQ(job_nnodes({}), 1);
  EXPECT_EQ(job_nnodes({{"NNODES", "2"}}), 2);
  EXPECT_EQ(job_nnodes({{"SLURM_NNODES", "4"}}), 4);
  EXPECT_EQ(job_nnodes({{"PET_NNODES", "1:4"}}), 4);
  EXPECT_EQ(job_nnodes({{"WORLD_SIZE", "16"}, {"LOCAL_WORLD_SIZE", "8"}}), 2);
  EXPECT_EQ(job_nnodes({{"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "8"}}), 1);
  EXPECT_EQ(check_master_addr({{"MASTER_ADDR", "localhost"}, {"NNODES", "2"}}).status, Status::kFail);
  EXPECT_EQ(check_master_addr({{"MASTER_ADDR", "127.0.0.1"}, {"SLURM_NNODES", "2"}}).status, Status::kFail);
  EXPECT_EQ(check_master_addr({{"MASTER_ADDR", "10.0.0.1"}, {"NNODES", "2"}}).status, Status::kPass);
  EXPECT_EQ(check_master_addr({{"MASTER_ADDR", "localhost"}, {"NNODES", "1"}}).status, Status::kPass);
  EXPECT_EQ(check_master_addr({{"NNODES", "2"}}).status, Status::kInfo);
  EXPECT_TRUE(is_loopback_address("127.0.1.1"));
  EXPECT_FALSE(is_loopback_address("10.1.2.3"));
}

// A listening TCP socket on 127.0.0.1 (port chosen by the kernel).
struct Listener {
  int fd = -1, port = 0;
  Listener() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd, 4);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd); }
};

TEST(DoctorEnv, MasterReachable) {
  int closed_port = 0;
  {
    Listener l;
    ASSERT_GT(l.port, 0);
    const CheckResult ok = check_master_reachable({{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(l.port)}}, 2000);
    EXPECT_EQ(ok.status, Status::kPass) << ok.finding;
    closed_port = l.port;
  }
  const CheckResult refused =
      check_master_reachable({{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(closed_port)}}, 2000);
  EXPECT_EQ(refused.status, Status::kInfo) << refused.finding;
  EXPECT_NE(refused.finding.find("nothing listens"), std::string::npos);
  EXPECT_EQ(check_master_reachable({}, 100).status, Status::kInfo);
}

TEST(DoctorGpu, Versions) {
  EXPECT_EQ(cuda_version_str(12040), "12.4");
  EXPECT_EQ(nccl_version_str(22105), "2.21.5");
  EXPECT_EQ(nccl_version_str(2708), "2.7.8");
  CudaInventory cpu;
  const CheckResult none = check_gpus(cpu);
  EXPECT_EQ(none.status, Status::kInfo);
  EXPECT_NE(none.finding.find("no GPU: CPU backend only"), std::string::npos);
  EXPECT_EQ(check_cuda_versions(cpu).status, Status::kInfo);
  CudaInventory inv;
  inv.built_with_cuda = true, inv.driver_version = 12020, inv.runtime_version = 12040;
  inv.gpus = {{"NVIDIA H100 80GB HBM3", 80 * kGiB, 9, 0}, {"NVIDIA H100 80GB HBM3", 80 * kGiB, 9, 0}};
  const CheckResult old = check_cuda_versions(inv);
  EXPECT_EQ(old.status, Status::kFail);
  EXPECT_NE(old.fix.find("12.4"), std::string::npos);
  inv.driver_version = 12080;
  EXPECT_EQ(check_cuda_versions(inv).status, Status::kPass);
  const CheckResult g = check_gpus(inv);
  EXPECT_EQ(g.status, Status::kPass);
  EXPECT_NE(g.finding.find("2 GPUs: 2 x NVIDIA H100"), std::string::npos);
  inv.gpus.push_back({"NVIDIA A100-SXM4-40GB", 40 * kGiB, 8, 0});
  EXPECT_EQ(check_gpus(inv).status, Status::kWarn);  // mixed models
  inv.driver_version = 0;
  EXPECT_EQ(check_cuda_versions(inv).status, Status::kFail);  // GPUs listed but no driver version
  inv.nccl_version = 22105;
  EXPECT_NE(check_nccl_version(inv).finding.find("2.21.5"), std::string::npos);
  // cuDNN: none (tripod's own attention kernels), 9.14 (flash attention, no
  // FP8 attention), 9.19 (both), 8.9 (not the major version tripod takes).
  CudaInventory cpu_build;
  EXPECT_EQ(check_cudnn_version(cpu_build).status, Status::kInfo);
  EXPECT_NE(check_cudnn_version(cpu_build).finding.find("CPU build"), std::string::npos);
  EXPECT_EQ(cudnn_version_str(91400), "9.14.0");
  EXPECT_EQ(cudnn_version_str(90100), "9.1.0");
  inv.cudnn_version = 0;
  const CheckResult no_cudnn = check_cudnn_version(inv);
  EXPECT_EQ(no_cudnn.status, Status::kInfo);
  EXPECT_NE(no_cudnn.finding.find("no libcudnn.so.9 found"), std::string::npos) << no_cudnn.finding;
  inv.cudnn_version = 91400, inv.cudnn_dir = "/usr/lib/x86_64-linux-gnu";
  const CheckResult old_cudnn = check_cudnn_version(inv);
  EXPECT_EQ(old_cudnn.status, Status::kInfo);
  EXPECT_NE(old_cudnn.finding.find("cuDNN 9.14.0 from /usr/lib/x86_64-linux-gnu"), std::string::npos)
      << old_cudnn.finding;
  EXPECT_NE(old_cudnn.finding.find("--fp8-dot-product-attention needs 9.19"), std::string::npos);
  EXPECT_NE(old_cudnn.fix.find("LD_LIBRARY_PATH"), std::string::npos);
  inv.cudnn_version = 91900;
  const CheckResult ok = check_cudnn_version(inv);
  EXPECT_EQ(ok.status, Status::kPass);
  EXPECT_NE(ok.finding.find("FP8 attention"), std::string::npos);
  inv.cudnn_version = 8907;
  EXPECT_EQ(check_cudnn_version(inv).status, Status::kWarn);
  // A CUDA build on a machine without the driver: the runtime reports driver
  // version 0 and "CUDA driver version is insufficient"; doctor says what that means.
  CudaInventory nodriver;
  nodriver.built_with_cuda = true, nodriver.runtime_version = 13000, nodriver.driver_version = 0;
  nodriver.error = "CUDA driver version is insufficient for CUDA runtime version";
  const CheckResult nd = check_gpus(nodriver);
  EXPECT_EQ(nd.status, Status::kInfo);
  EXPECT_NE(nd.finding.find("no NVIDIA driver on this machine"), std::string::npos) << nd.finding;
  EXPECT_EQ(nd.finding.find("insufficient"), std::string::npos) << nd.finding;
}

const char* kDgx =
    "\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV18\tNV18\tNV18\tSYS\t0-55\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tNV18\tNV18\tSYS\t0-55\t0\t\tN/A\n"
    "GPU2\tNV18\tNV18\t X \tNV18\tSYS\t0-55\t0\t\tN/A\n"
    "GPU3\tNV18\tNV18\tNV18\t X \tPIX\t0-55\t0\t\tN/A\n"
    "NIC0\tSYS\tSYS\tSYS\tPIX\t X \n\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n";

const char* kPairs =  // two NVLink pairs joined over PCIe / SMP
    "        GPU0    GPU1    GPU2    GPU3    CPU Affinity    NUMA Affinity\n"
    "GPU0     X      NV4     PHB     SYS     0-15            0\n"
    "GPU1    NV4      X      SYS     PHB     0-15            0\n"
    "GPU2    PHB     SYS      X      NV4     16-31           1\n"
    "GPU3    SYS     PHB     NV4      X      16-31           1\n";

TEST(DoctorGpu, Topology) {
  const auto t = parse_topology(kDgx);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->num_gpus, 4);
  EXPECT_EQ(t->link[0][3], "NV18");
  EXPECT_EQ(t->link[2][2], "X");
  EXPECT_EQ(check_topology(std::string(kDgx), 0).status, Status::kPass);
  EXPECT_EQ(check_topology(std::string(kDgx), 4).status, Status::kPass);
  const CheckResult over = check_topology(std::string(kDgx), 8);  // more than the node
  EXPECT_EQ(over.status, Status::kWarn);
  EXPECT_NE(over.finding.find("cross nodes"), std::string::npos);

  const CheckResult pcie = check_topology(std::string(kPairs), 0);
  EXPECT_EQ(pcie.status, Status::kWarn);
  EXPECT_NE(pcie.finding.find("4 pairs over PCIe"), std::string::npos);
  EXPECT_NE(pcie.finding.find("GPU0-GPU2 PHB"), std::string::npos);
  EXPECT_EQ(check_topology(std::string(kPairs), 2).status, Status::kPass);  // TP pairs on NVLink
  const CheckResult tp4 = check_topology(std::string(kPairs), 4);
  EXPECT_EQ(tp4.status, Status::kWarn);
  EXPECT_NE(tp4.finding.find("TP 4 groups would cross PCIe (4 pairs)"), std::string::npos);

  // One H200 as nvidia-smi prints it into a pipe: the header is underlined
  // with ANSI escapes.
  const auto one = parse_topology(
      "\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\nGPU0\t X \t0-15\t0\t\tN/A\n\nLegend:\n");
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->num_gpus, 1);
  EXPECT_EQ(one->link[0][0], "X");
  EXPECT_FALSE(parse_topology("No devices were found\n").has_value());
  EXPECT_EQ(check_topology(std::string("No devices were found\n"), 0).status, Status::kWarn);
  EXPECT_EQ(check_topology(std::nullopt, 2).status, Status::kInfo);
  EXPECT_TRUE(is_nvlink("NV12"));
  EXPECT_FALSE(is_nvlink("NODE"));
}

TEST(DoctorComm, AllReduceSweepTwoThreads) {
  auto store = std::make_shared<comm::HashStore>();
  std::vector<std::vector<BandwidthPoint>> got(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      auto ctx = comm::DistContext::init_with_store(r, 2, store, DeviceType::CPU, std::chrono::seconds(60));
      got[r] = measure_all_reduce(*ctx->world(), nullptr, {4096, 1 << 18}, 2);
    });
  for (auto& t : ranks) t.join();
  ASSERT_EQ(got[0].size(), 2u);
  for (int r = 0; r < 2; ++r)
    for (const auto& p : got[r]) {
      EXPECT_EQ(p.wrong, 0);
      EXPECT_GT(p.seconds, 0);
      // nccl-tests: busbw = algbw x 2(n-1)/n = algbw at n = 2.
      EXPECT_DOUBLE_EQ(p.busbw_gbs, p.algbw_gbs);
      EXPECT_DOUBLE_EQ(p.algbw_gbs, double(p.bytes) / p.seconds / 1e9);
    }
  EXPECT_EQ(got[0][1].bytes, 1 << 18);
  EXPECT_DOUBLE_EQ(got[0][1].seconds, got[1][1].seconds);  // the slowest rank's time, on every rank
  EXPECT_EQ(check_all_reduce(got[0], 2, "Gloo").status, Status::kPass);
  auto bad = got[0];
  bad[0].wrong = 3;
  EXPECT_EQ(check_all_reduce(bad, 2, "Gloo").status, Status::kFail);
}

}  // namespace
}  // namespace tripod::doctor
