// TensorBoard event files (train/tensorboard.h) checked against an
// independent reader written here: a bit-by-bit CRC-32C (no table), a
// TFRecord parser that verifies both masked CRCs, and a generic protobuf
// wire-format walker for Event / Summary / Value (field numbers from
// TensorFlow's event.proto and summary.proto). The end-to-end case runs the
// real `tripod train --tensorboard-dir --metrics-file` and compares every
// scalar with the same run's JSONL record.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "testing/run_tripod.h"
#include "train/tensorboard.h"

namespace {

namespace fs = std::filesystem;
using tripod::train::crc32c;

// Reference CRC-32C: shift register, one bit at a time.
uint32_t crc32c_bitwise(const std::string& s) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}
uint32_t mask(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

template <typename T> T read_le(const std::string& s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof(T));
  return v;
}

// A protobuf message as field number -> values (raw bytes for length-delimited
// and fixed-width fields, the number for varints).
struct Field {
  int wire;
  uint64_t varint = 0;
  std::string bytes;
};
std::multimap<int, Field> parse_proto(const std::string& s) {
  std::multimap<int, Field> out;
  size_t p = 0;
  auto varint = [&]() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (p >= s.size()) throw std::runtime_error("truncated varint");
      const auto b = static_cast<unsigned char>(s[p++]);
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  while (p < s.size()) {
    const uint64_t key = varint();
    Field f{static_cast<int>(key & 7)};
    const size_t n = f.wire == 0 ? 0 : f.wire == 1 ? 8 : f.wire == 5 ? 4 : f.wire == 2 ? size_t(-1) : size_t(-2);
    if (f.wire == 0) {
      f.varint = varint();
    } else if (n == size_t(-1)) {
      const uint64_t len = varint();
      if (p + len > s.size()) throw std::runtime_error("truncated bytes");
      f.bytes = s.substr(p, len);
      p += len;
    } else if (n == size_t(-2)) {
      throw std::runtime_error("unexpected wire type " + std::to_string(f.wire));
    } else {
      if (p + n > s.size()) throw std::runtime_error("truncated fixed");
      f.bytes = s.substr(p, n);
      p += n;
    }
    out.emplace(static_cast<int>(key >> 3), f);
  }
  return out;
}

struct Scalar {
  int64_t step;
  std::string tag;
  float value;
  double wall_time;
};
struct EventFile {
  std::string file_version;
  double first_wall_time = 0;
  std::vector<Scalar> scalars;
};

// TFRecord stream -> events, checking both CRCs of every record.
EventFile read_event_file(const std::string& bytes) {
  EventFile ef;
  size_t p = 0;
  int record = 0;
  while (p < bytes.size()) {
    if (p + 12 > bytes.size()) throw std::runtime_error("truncated header");
    const std::string len_bytes = bytes.substr(p, 8);
    const auto len = read_le<uint64_t>(bytes, p);
    EXPECT_EQ(read_le<uint32_t>(bytes, p + 8), mask(crc32c_bitwise(len_bytes))) << "length crc, record " << record;
    if (p + 12 + len + 4 > bytes.size()) throw std::runtime_error("truncated record");
    const std::string data = bytes.substr(p + 12, len);
    EXPECT_EQ(read_le<uint32_t>(bytes, p + 12 + len), mask(crc32c_bitwise(data))) << "data crc, record " << record;
    p += 12 + len + 4;
    auto ev = parse_proto(data);
    EXPECT_EQ(ev.count(1), 1u);
    const double wall = read_le<double>(ev.find(1)->second.bytes, 0);
    const int64_t step = ev.count(2) ? static_cast<int64_t>(ev.find(2)->second.varint) : 0;
    if (record == 0) {
      EXPECT_EQ(ev.count(3), 1u) << "first record must carry file_version";
      if (ev.count(3)) ef.file_version = ev.find(3)->second.bytes;
      ef.first_wall_time = wall;
    }
    if (ev.count(5)) {
      auto summary = parse_proto(ev.find(5)->second.bytes);
      for (auto [it, end] = summary.equal_range(1); it != end; ++it) {
        auto value = parse_proto(it->second.bytes);
        EXPECT_EQ(value.count(1), 1u);
        EXPECT_EQ(value.count(2), 1u);
        EXPECT_EQ(value.find(2)->second.wire, 5);
        ef.scalars.push_back({step, value.find(1)->second.bytes, read_le<float>(value.find(2)->second.bytes, 0), wall});
      }
    }
    ++record;
  }
  return ef;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Crc32c, KnownVectors) {
  const std::string check = "123456789";
  EXPECT_EQ(crc32c(check.data(), check.size()), 0xE3069283u);
  EXPECT_EQ(crc32c_bitwise(check), 0xE3069283u);
  // RFC 3720 (iSCSI) appendix B.4: 32 zero bytes, 32 0xFF bytes, 0..31.
  std::string zeros(32, '\0'), ones(32, '\xff'), inc(32, '\0');
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<char>(i);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c("", 0), 0u);
  // Masking by hand: rotate right 15, add the constant.
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(tripod::train::masked_crc32c(check.data(), check.size()), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TfRecord, FrameLayout) {
  const std::string payload = "hello tensorboard";
  const std::string rec = tripod::train::tfrecord_frame(payload);
  ASSERT_EQ(rec.size(), 8 + 4 + payload.size() + 4);
  EXPECT_EQ(read_le<uint64_t>(rec, 0), payload.size());
  EXPECT_EQ(read_le<uint32_t>(rec, 8), mask(crc32c_bitwise(rec.substr(0, 8))));
  EXPECT_EQ(rec.substr(12, payload.size()), payload);
  EXPECT_EQ(read_le<uint32_t>(rec, 12 + payload.size()), mask(crc32c_bitwise(payload)));
}

TEST(TfRecord, ScalarEventBytes) {
  // Hand-encoded: Event{wall_time=1.5 (key 0x09), step=300 (key 0x10, varint ac 02),
  //   summary (key 0x2a, 10 bytes) {value (key 0x0a, 8 bytes) {tag "x" (0a 01 78), simple_value 2.0f (15 00 00 00 40)}}}.
  const std::string e = tripod::train::encode_scalar_event(1.5, 300, "x", 2.0f);
  std::string want = "\x09";
  want.append("\x00\x00\x00\x00\x00\x00\xf8\x3f", 8);
  want.append("\x10\xac\x02\x2a\x0a\x0a\x08\x0a\x01\x78\x15\x00\x00\x00\x40", 15);
  EXPECT_EQ(e, want);
}

TEST(TensorBoardWriter, RoundTripAndFileName) {
  const fs::path dir = fs::temp_directory_path() / ("tripod_tb_" + std::to_string(::getpid())) / "nested";
  const double t0 = static_cast<double>(std::time(nullptr));
  std::string path;
  {
    tripod::train::TensorBoardWriter w(dir.string());
    ASSERT_TRUE(w.enabled());
    path = w.path();
    w.add_scalar("lm loss", 1, 4.25);
    w.add_scalar("lm loss", 2, 3.5);
    w.add_scalar("learning-rate", 2, 1e-4);
    w.add_scalar("neg", 1000000000000, -7.0);
    w.flush();
    // Flushed records are readable while the writer is still open.
    EXPECT_EQ(read_event_file(slurp(path)).scalars.size(), 4u);
  }
  const std::string name = fs::path(path).filename().string();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  EXPECT_NE(name.find(std::string(".") + host), std::string::npos) << name;
  const EventFile ef = read_event_file(slurp(path));
  EXPECT_EQ(ef.file_version, "brain.Event:2");
  EXPECT_GE(ef.first_wall_time, t0 - 1);
  EXPECT_LE(ef.first_wall_time, static_cast<double>(std::time(nullptr)) + 1);
  ASSERT_EQ(ef.scalars.size(), 4u);
  EXPECT_EQ(ef.scalars[0].tag, "lm loss");
  EXPECT_EQ(ef.scalars[0].step, 1);
  EXPECT_EQ(ef.scalars[0].value, 4.25f);
  EXPECT_EQ(ef.scalars[1].step, 2);
  EXPECT_EQ(ef.scalars[1].value, 3.5f);
  EXPECT_EQ(ef.scalars[2].value, 1e-4f);
  EXPECT_EQ(ef.scalars[3].step, 1000000000000);
  EXPECT_EQ(ef.scalars[3].value, -7.0f);
  fs::remove_all(dir.parent_path());
}

TEST(TensorBoardWriter, UncreatableDirNamesIt) {
  const fs::path base = fs::temp_directory_path() / ("tripod_tb_bad_" + std::to_string(::getpid()));
  fs::create_directories(base);
  std::ofstream(base / "afile") << "x";
  const std::string bad = (base / "afile" / "tb").string();
  try {
    tripod::train::TensorBoardWriter w(bad);
    ADD_FAILURE() << "no error for " << bad;
  } catch (const tripod::Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--tensorboard-dir"), std::string::npos) << e.what();
  }
  fs::remove_all(base);
}

using Result = tripod::testing::TripodRun;
Result run(const std::string& args) { return tripod::testing::run_tripod(args); }

// The event file of a real run holds exactly the JSONL's numbers (as float).
TEST(TensorBoardCli, ScalarsMatchMetricsFile) {
  const fs::path dir = fs::temp_directory_path() / ("tripod_tb_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string metrics = (dir / "m.jsonl").string(), tb = (dir / "tb").string();
  Result r = run("train --num-layers 1 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64 "
                 "--micro-batch-size 4 --global-batch-size 4 --lr 3e-3 --train-iters 12 --log-interval 4 "
                 "--eval-interval 6 --eval-iters 1 --mock-data --metrics-file " +
                 metrics + " --tensorboard-dir " + tb);
  ASSERT_EQ(r.code, 0) << r.output;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(tb)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  const EventFile ef = read_event_file(slurp(files[0]));
  EXPECT_EQ(ef.file_version, "brain.Event:2");
  std::map<std::pair<std::string, int64_t>, float> got;
  for (const auto& s : ef.scalars) EXPECT_TRUE(got.emplace(std::make_pair(s.tag, s.step), s.value).second) << s.tag;

  std::ifstream in(metrics);
  std::string line;
  size_t expected = 0, train_records = 0, eval_records = 0;
  auto expect = [&](const std::string& tag, int64_t step, double v) {
    ++expected;
    auto it = got.find({tag, step});
    ASSERT_NE(it, got.end()) << "no '" << tag << "' at step " << step;
    EXPECT_EQ(it->second, static_cast<float>(v)) << tag << " at " << step;
  };
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    const int64_t it = j["iteration"];
    if (j.contains("lm_loss")) {
      ++train_records;
      expect("lm loss", it, j["lm_loss"]);
      expect("learning-rate", it, j["lr"]);
      expect("grad-norm", it, j["grad_norm"]);
      expect("loss-scale", it, j["loss_scale"]);
      expect("batch-size", it, 4);
      expect("iteration-time", it, j["elapsed_ms"].get<double>() / 1e3);
      expect("throughput", it, j["tflops_per_gpu"]);
      expect("tokens-per-sec", it, j["tokens_per_sec"]);
      expect("mem-peak-bytes", it, j["mem_peak_bytes"].get<double>());
      expect("skipped-iters", it, j["skipped_iters"].get<double>());
      if (!j["mfu"].is_null()) expect("mfu", it, j["mfu"]);
      for (const char* part : {"compute", "tp_comm", "pp_wait", "dp_comm", "optimizer", "data"}) {
        std::string tag = std::string("time/") + part + "-ms";
        std::replace(tag.begin(), tag.end(), '_', '-');
        expect(tag, it, j[std::string("time_") + part + "_ms"].get<double>());
      }
    } else {
      ++eval_records;
      expect("lm loss validation", it, j["val_loss"]);
      expect("lm loss validation ppl", it, j["val_ppl"]);
    }
  }
  EXPECT_EQ(train_records, 3u);  // iterations 4, 8, 12
  EXPECT_EQ(eval_records, 2u);   // iterations 6, 12
  EXPECT_EQ(got.size(), expected) << "event file has scalars the JSONL does not";
  fs::remove_all(dir);
}

TEST(TensorBoardCli, BadDirFailsNamingIt) {
  const fs::path dir = fs::temp_directory_path() / ("tripod_tb_cli_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "afile") << "x";
  const std::string bad = (dir / "afile" / "tb").string();
  Result r = run("train --num-layers 1 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64 "
                 "--micro-batch-size 4 --global-batch-size 4 --train-iters 2 --mock-data --tensorboard-dir " + bad);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find(bad), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hint:"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

}  // namespace
