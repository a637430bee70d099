// Implementation of train/tensorboard.h: CRC-32C, TFRecord framing and the
// few protobuf wire-format pieces an Event with scalars needs.
// Protobuf wire format: key = (field << 3) | wire type; 0 varint, 1 fixed64
// (little endian), 2 length-delimited (varint length + bytes), 5 fixed32.
#include "train/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>

#include "base/error.h"
#include "train/metrics.h"

namespace tripod::train {
namespace {

// Byte-at-a-time table for the reflected Castagnoli polynomial.
constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrcTable = make_crc32c_table();

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

template <typename T> void put_le(std::string& out, T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // the targets we build for are little endian
  out.append(reinterpret_cast<const char*>(b), sizeof(T));
}

void put_key(std::string& out, int field, int wire_type) { put_varint(out, static_cast<uint64_t>(field << 3 | wire_type)); }

void put_bytes(std::string& out, int field, std::string_view s) {
  put_key(out, field, 2);
  put_varint(out, s.size());
  out.append(s);
}

// Event fields 1 (wall_time) and 2 (step), shared by every record.
std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_key(e, 1, 1);
  put_le<double>(e, wall_time);
  if (step != 0) {  // proto3 omits defaults
    put_key(e, 2, 0);
    put_varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == 0) return "localhost";
  return buf;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = kCrcTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord_frame(std::string_view payload) {
  std::string out;
  put_le<uint64_t>(out, payload.size());
  put_le<uint32_t>(out, masked_crc32c(out.data(), 8));
  out.append(payload);
  put_le<uint32_t>(out, masked_crc32c(payload.data(), payload.size()));
  return out;
}

std::string encode_file_version_event(double wall_time, std::string_view version) {
  std::string e = event_header(wall_time, 0);
  put_bytes(e, 3, version);
  return e;
}

std::string encode_scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string v;  // Summary.Value
  put_bytes(v, 1, tag);
  put_key(v, 2, 5);
  put_le<float>(v, value);
  std::string s;  // Summary
  put_bytes(s, 1, v);
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, s);
  return e;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TRIPOD_CHECK_HINT(!ec, "pass a --tensorboard-dir that can be created (check the parent's permissions)",
                    "cannot create --tensorboard-dir '{}': {}", dir, ec.message());
  // A second writer in the same second on the same host (a restart) gets the pid appended.
  const std::string base = (std::filesystem::path(dir) /
                            ("events.out.tfevents." + std::to_string(std::time(nullptr)) + "." + host_name()))
                               .string();
  path_ = base;
  file_ = std::fopen(path_.c_str(), "wbx");
  if (!file_ && errno == EEXIST) {
    path_ = base + "." + std::to_string(::getpid());
    file_ = std::fopen(path_.c_str(), "wbx");
  }
  TRIPOD_CHECK_HINT(file_, "pass a writable --tensorboard-dir (check its permissions and free space)",
                    "cannot create TensorBoard event file '{}': {}", path_, std::strerror(errno));
  write_record(encode_file_version_event(now_seconds(), "brain.Event:2"));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::write_record(const std::string& payload) {
  const std::string rec = tfrecord_frame(payload);
  const size_t n = std::fwrite(rec.data(), 1, rec.size(), file_);
  TRIPOD_CHECK_HINT(n == rec.size(), "check free space on the --tensorboard-dir file system",
                    "write to TensorBoard event file '{}' failed: {}", path_, std::strerror(errno));
}

void TensorBoardWriter::add_scalar(std::string_view tag, int64_t step, double value) {
  if (!file_) return;
  write_record(encode_scalar_event(now_seconds(), step, tag, static_cast<float>(value)));
}

void TensorBoardWriter::flush() {
  if (file_) std::fflush(file_);
}

void TensorBoardWriter::write_train(const IterationMetrics& m) {
  if (!file_) return;
  const int64_t it = m.iteration;
  add_scalar("lm loss", it, m.lm_loss);
  add_scalar("learning-rate", it, m.lr);
  add_scalar("grad-norm", it, m.grad_norm);
  add_scalar("loss-scale", it, m.loss_scale);
  add_scalar("batch-size", it, static_cast<double>(m.global_batch_size));
  add_scalar("iteration-time", it, m.elapsed_ms / 1e3);  // seconds, as Megatron
  add_scalar("throughput", it, m.tflops_per_gpu);        // TFLOP/s per GPU, as Megatron
  add_scalar("tokens-per-sec", it, m.tokens_per_sec);
  if (m.mfu) add_scalar("mfu", it, *m.mfu);
  add_scalar("mem-peak-bytes", it, static_cast<double>(m.mem_peak_bytes));
  add_scalar("skipped-iters", it, static_cast<double>(m.skipped_iters));
  if (m.pp_bubble) add_scalar("pp-bubble", it, *m.pp_bubble);
  if (m.moe) {  // Megatron's names under moe/
    add_scalar("moe/load_balancing_loss", it, m.moe->load_balancing_loss);
    add_scalar("moe/z_loss", it, m.moe->z_loss);
    add_scalar("moe/min_tokens_per_expert", it, static_cast<double>(m.moe->min_tokens_per_expert));
    add_scalar("moe/max_tokens_per_expert", it, static_cast<double>(m.moe->max_tokens_per_expert));
  }
  // The iteration's time split (ms per iteration), grouped under time/.
  add_scalar("time/compute-ms", it, m.time.compute_ms);
  add_scalar("time/tp-comm-ms", it, m.time.tp_comm_ms);
  add_scalar("time/pp-wait-ms", it, m.time.pp_wait_ms);
  add_scalar("time/dp-comm-ms", it, m.time.dp_comm_ms);
  add_scalar("time/optimizer-ms", it, m.time.optimizer_ms);
  add_scalar("time/data-ms", it, m.time.data_ms);
  flush();
}

void TensorBoardWriter::write_eval(int64_t iteration, double val_loss) {
  if (!file_) return;
  add_scalar("lm loss validation", iteration, val_loss);
  add_scalar("lm loss validation ppl", iteration, std::exp(std::min(val_loss, 20.0)));
  flush();
}

}  // namespace tripod::train
