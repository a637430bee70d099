// safetensors writer/reader: the byte layout against a hand-built file, a
// round trip, and that every truncation, every flipped header byte, a sample
// of flipped data bytes and crafted headers give an Error naming the file
// (never a crash or an out-of-bounds read; run under ASan to check the latter).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/error.h"
#include "ckpt/safetensors.h"

namespace {

namespace fs = std::filesystem;
using tripod::DType;
using tripod::Tensor;
using namespace tripod::ckpt;

fs::path tmp_dir() {
  static const fs::path d = [] {
    fs::path p = fs::temp_directory_path() / ("tripod_st_" + std::to_string(::getpid()));
    fs::create_directories(p);
    std::atexit([] { fs::remove_all(fs::temp_directory_path() / ("tripod_st_" + std::to_string(::getpid()))); });
    return p;
  }();
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void spit(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(s.data(), static_cast<std::streamsize>(s.size()));
}

Tensor iota(tripod::Shape shape, float base) {
  Tensor t = Tensor::empty(shape, DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = base + static_cast<float>(i) * 0.5f;
  return t;
}

// Reads every tensor of the file; throws on any problem.
void read_all(const fs::path& p) {
  auto f = SafetensorsFile::open(p.string());
  for (const auto& e : f.entries()) f.read(e.name);
}

void expect_error_naming(const fs::path& p) {
  try {
    read_all(p);
    ADD_FAILURE() << "no error for " << p;
  } catch (const tripod::Error& e) {
    EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
  }
}

TEST(Safetensors, Crc32KnownValue) {
  // The standard check value of CRC-32/ISO-HDLC.
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(crc32("6789", 4, crc32("12345", 5)), 0xCBF43926u);
}

TEST(Safetensors, ByteLayoutMatchesTheFormat) {
  const fs::path p = tmp_dir() / "layout.safetensors";
  Tensor a = iota({2, 3}, 1.f);
  write_safetensors(p.string(), {{"a", a}}, {}, /*with_checksums=*/false);
  const std::string b = slurp(p);
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);  // little-endian host
  ASSERT_EQ(b.size(), 8 + n + 24);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = b.substr(8, n);
  EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
            R"({"a":{"data_offsets":[0,24],"dtype":"F32","shape":[2,3]}})");
  EXPECT_EQ(std::memcmp(b.data() + 8 + n, a.raw(), 24), 0);
}

// The streamed writer, fed in pieces of odd sizes that cross tensor ends
// (and an empty tensor at the end), against the file built here by hand: the
// length, the header with each tensor's CRC (written last, at the start of
// the file) and the data; and the same bytes as write_safetensors.
TEST(Safetensors, StreamedWriterInPiecesMatchesTheHandBuiltFile) {
  const fs::path p = tmp_dir() / "streamed.safetensors", q = tmp_dir() / "whole.safetensors";
  Tensor a = iota({2, 3}, 1.f), e = Tensor::empty({0}, DType::F32), b = iota({5}, -2.f);
  std::string data(reinterpret_cast<const char*>(a.raw()), 24);
  data.append(reinterpret_cast<const char*>(b.raw()), 20);
  {
    SafetensorsWriter w(p.string(), {{"a", DType::F32, {2, 3}}, {"b", DType::F32, {5}}, {"e", DType::F32, {0}}},
                        {{"k", "v"}});
    for (size_t at = 0, piece = 7; at < data.size(); at += piece) w.write(data.data() + at, std::min(piece, data.size() - at));
    w.finish();
  }
  char crc_a[9], crc_b[9];
  std::snprintf(crc_a, sizeof crc_a, "%08x", crc32(a.raw(), 24));
  std::snprintf(crc_b, sizeof crc_b, "%08x", crc32(b.raw(), 20));
  std::string header = std::string(R"({"__metadata__":{"crc32.a":")") + crc_a + R"(","crc32.b":")" + crc_b +
                       R"(","crc32.e":"00000000","k":"v"},"a":{"data_offsets":[0,24],"dtype":"F32","shape":[2,3]},)"
                       R"("b":{"data_offsets":[24,44],"dtype":"F32","shape":[5]},)"
                       R"("e":{"data_offsets":[44,44],"dtype":"F32","shape":[0]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string expected(8, '\0');
  for (int i = 0; i < 8; ++i) expected[size_t(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  expected += header + data;
  EXPECT_EQ(slurp(p), expected);
  write_safetensors(q.string(), {{"a", a}, {"b", b}, {"e", e}}, {{"k", "v"}});
  EXPECT_EQ(slurp(q), expected);
  read_all(p);
}

TEST(Safetensors, StreamedWriterChecksWhatItIsGiven) {
  const fs::path p = tmp_dir() / "short.safetensors";
  Tensor a = iota({4}, 0.f);
  SafetensorsWriter w(p.string(), {{"a", DType::F32, {4}}}, {});
  w.write(a.raw(), 12);
  EXPECT_THROW(w.finish(), tripod::Error);  // a tensor not written in full
  EXPECT_THROW(w.write(a.raw(), 8), tripod::Error);  // past the declared bytes
}

TEST(Safetensors, RoundTripWithMetadataAndDtypes) {
  const fs::path p = tmp_dir() / "rt.safetensors";
  Tensor a = iota({4, 5}, -3.f), c = iota({7}, 2.f);
  Tensor h = Tensor::empty({3}, DType::BF16);
  const float hv[3] = {1.5f, -2.25f, 1024.f};
  for (int i = 0; i < 3; ++i) h.data_u16()[i] = tripod::f32_to_bf16(hv[i]);
  write_safetensors(p.string(), {{"x.a", a}, {"y", c}, {"h", h}}, {{"k", "v"}});
  auto f = SafetensorsFile::open(p.string());
  EXPECT_EQ(f.metadata().at("k"), "v");
  ASSERT_EQ(f.entries().size(), 3u);
  Tensor ra = f.read("x.a"), rc = f.read("y"), rh = f.read_f32("h");
  EXPECT_EQ(ra.shape(), a.shape());
  EXPECT_EQ(std::memcmp(ra.raw(), a.raw(), a.nbytes()), 0);
  EXPECT_EQ(std::memcmp(rc.raw(), c.raw(), c.nbytes()), 0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(rh.data<float>()[i], hv[i]);
  EXPECT_THROW(f.read("nope"), tripod::Error);
}

TEST(Safetensors, EveryTruncationIsAnError) {
  const fs::path dir = tmp_dir(), p = dir / "full.safetensors", q = dir / "cut.safetensors";
  write_safetensors(p.string(), {{"a", iota({3, 4}, 0.f)}, {"b", iota({5}, 1.f)}}, {});
  const std::string b = slurp(p);
  for (size_t len = 0; len < b.size(); ++len) {
    spit(q, b.substr(0, len));
    expect_error_naming(q);
  }
}

TEST(Safetensors, FlippedBytesAreErrors) {
  const fs::path dir = tmp_dir(), p = dir / "ok.safetensors", q = dir / "flip.safetensors";
  write_safetensors(p.string(), {{"a", iota({3, 4}, 0.f)}, {"b", iota({5}, 1.f)}}, {});
  const std::string b = slurp(p);
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  read_all(p);
  // Every byte of the length and of the data (CRC-checked); header flips are
  // caught by the checkpoint's header CRC (test_checkpoint), here only the
  // ones that break the structure must fail, and none may crash.
  for (size_t i = 0; i < b.size(); ++i) {
    for (int bit : {0, 5}) {
      std::string c = b;
      c[i] = static_cast<char>(c[i] ^ (1 << bit));
      spit(q, c);
      if (i < 8 || i >= 8 + n) {
        expect_error_naming(q);
      } else {
        try {
          read_all(q);
        } catch (const tripod::Error&) {
        }
      }
    }
  }
}

TEST(Safetensors, CraftedHeadersAreErrors) {
  const fs::path q = tmp_dir() / "crafted.safetensors";
  auto file = [&](const std::string& header, size_t data_bytes, uint64_t claimed = 0) {
    std::string s(8, '\0');
    uint64_t n = claimed ? claimed : header.size();
    std::memcpy(s.data(), &n, 8);
    s += header + std::string(data_bytes, '\0');
    spit(q, s);
  };
  file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8, 1ull << 62);  // huge length
  expect_error_naming(q);
  file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8);  // past the end
  expect_error_naming(q);
  file(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", 8);  // overflow
  expect_error_naming(q);
  file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12);  // overlap
  expect_error_naming(q);
  file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8);  // reversed
  expect_error_naming(q);
  file(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8);  // unknown dtype
  expect_error_naming(q);
  file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8);  // negative dim
  expect_error_naming(q);
  file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12);  // trailing bytes
  expect_error_naming(q);
  file(R"({"a":"x"})", 0);
  expect_error_naming(q);
  file(R"([1,2,3])", 0);
  expect_error_naming(q);
}

}  // namespace
