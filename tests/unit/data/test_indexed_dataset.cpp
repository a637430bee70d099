// Tests for data/indexed_dataset.h: the writer's bytes against a layout built
// by hand from Megatron's MMIDIDX description, reading back every dtype, and
// the errors for missing, truncated and corrupt files.
#include "data/indexed_dataset.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "test_util.h"

namespace tripod::data {
namespace {

using testing::read_bytes;
using testing::TempDir;
using testing::write_docs;

template <typename T>
void put(std::string* s, T v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// The .idx of Megatron's _IndexWriter for documents of the given lengths.
std::string hand_built_idx(const std::vector<int32_t>& lengths, uint8_t code, int64_t esize) {
  std::string s("MMIDIDX\0\0", 9);
  put<uint64_t>(&s, 1);
  put<uint8_t>(&s, code);
  put<uint64_t>(&s, lengths.size());
  put<uint64_t>(&s, lengths.size() + 1);
  for (int32_t l : lengths) put<int32_t>(&s, l);
  int64_t ptr = 0;
  for (int32_t l : lengths) {
    put<int64_t>(&s, ptr);
    ptr += l * esize;
  }
  for (size_t i = 0; i <= lengths.size(); ++i) put<int64_t>(&s, static_cast<int64_t>(i));
  return s;
}

std::string error_of(const std::string& prefix) {
  try {
    IndexedDataset d(prefix);
  } catch (const Error& e) {
    return e.message() + " | hint: " + e.hint();
  }
  return "";
}

TEST(IndexedDataset, WriterBytesMatchMegatronLayoutUInt16) {
  TempDir dir;
  const std::string p = dir / "x";
  write_docs(p, {{1, 2, 3}, {65535}, {}, {7, 0}});
  EXPECT_EQ(read_bytes(p + ".idx"), hand_built_idx({3, 1, 0, 2}, 8, 2));
  std::string bin;
  for (uint16_t t : {1, 2, 3, 65535, 7, 0}) put<uint16_t>(&bin, t);
  EXPECT_EQ(read_bytes(p + ".bin"), bin);
  // No temporary files are left behind.
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 2);
}

TEST(IndexedDataset, WriterBytesMatchMegatronLayoutInt32) {
  TempDir dir;
  const std::string p = dir / "y";
  write_docs(p, {{100000, 5}, {70000}}, TokenDType::kInt32);
  EXPECT_EQ(read_bytes(p + ".idx"), hand_built_idx({2, 1}, 4, 4));
  std::string bin;
  for (int32_t t : {100000, 5, 70000}) put<int32_t>(&bin, t);
  EXPECT_EQ(read_bytes(p + ".bin"), bin);
}

TEST(IndexedDataset, ReadsBackEveryDocument) {
  TempDir dir;
  for (auto dt : {TokenDType::kUInt16, TokenDType::kInt32, TokenDType::kUInt8}) {
    const std::string p = dir / dtype_name(dt);
    std::vector<std::vector<int32_t>> docs = {{5, 6, 7, 8}, {9}, {}, {250, 1, 2}};
    write_docs(p, docs, dt);
    IndexedDataset d(p);
    EXPECT_EQ(d.dtype(), dt);
    ASSERT_EQ(d.num_sequences(), 4);
    EXPECT_EQ(d.num_documents(), 4);
    EXPECT_EQ(d.num_tokens(), 8);
    EXPECT_EQ(d.max_token_id(), 250);
    for (size_t i = 0; i < docs.size(); ++i) {
      ASSERT_EQ(d.length(static_cast<int64_t>(i)), static_cast<int32_t>(docs[i].size()));
      std::vector<int32_t> got(docs[i].size());
      d.read(static_cast<int64_t>(i), 0, d.length(static_cast<int64_t>(i)), got.data());
      EXPECT_EQ(got, docs[i]) << dtype_name(dt) << " doc " << i;
    }
    int32_t mid[2];
    d.read(0, 1, 2, mid);
    EXPECT_EQ(mid[0], 6);
    EXPECT_EQ(mid[1], 7);
    EXPECT_THROW(d.read(0, 3, 2, mid), Error);
  }
}

TEST(IndexedDataset, DocumentsLargerThanTheWriteBuffer) {
  TempDir dir;
  std::vector<int32_t> big(3'000'000);  // 6 MB of uint16: crosses the 4 MiB buffer
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<int32_t>((i * 7919) % 50257);
  write_docs(dir / "b", {{1, 2}, big, {3}});
  IndexedDataset d(dir / "b");
  std::vector<int32_t> got(big.size());
  d.read(1, 0, d.length(1), got.data());
  EXPECT_EQ(got, big);
  int32_t last;
  d.read(2, 0, 1, &last);
  EXPECT_EQ(last, 3);
}

TEST(IndexedDataset, WriterRejectsIdsTheDtypeCannotHold) {
  TempDir dir;
  IndexedDatasetWriter w(dir / "z", TokenDType::kUInt16);
  const int32_t bad[] = {1, 65536};
  EXPECT_THROW(w.add_document(bad, 2), Error);
}

TEST(IndexedDataset, UnfinishedWriterLeavesNothing) {
  TempDir dir;
  {
    IndexedDatasetWriter w(dir / "z", TokenDType::kUInt16);
    const int32_t t[] = {1, 2};
    w.add_document(t, 2);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(IndexedDataset, MissingFilesNameTheFileAndTheFix) {
  TempDir dir;
  const std::string p = dir / "d";
  std::string e = error_of(p);
  EXPECT_NE(e.find(p + ".idx"), std::string::npos) << e;
  EXPECT_NE(e.find("tripod preprocess"), std::string::npos) << e;
  write_docs(p, {{1, 2, 3}});
  std::filesystem::remove(p + ".bin");
  e = error_of(p);
  EXPECT_NE(e.find(p + ".bin"), std::string::npos) << e;
}

TEST(IndexedDataset, TruncatedBinIsCaught) {
  TempDir dir;
  const std::string p = dir / "d";
  write_docs(p, {{1, 2, 3}, {4, 5}});
  std::filesystem::resize_file(p + ".bin", 9);  // 4.5 of 5 tokens
  const std::string e = error_of(p);
  EXPECT_NE(e.find(p + ".bin is truncated"), std::string::npos) << e;
}

TEST(IndexedDataset, BinOfAnotherCorpusIsCaught) {
  // The .idx of a short corpus next to the .bin of a longer one: every sequence
  // the index names lies inside the .bin, but the .bin goes on past the last.
  TempDir dir;
  const std::string p = dir / "d", q = dir / "long";
  write_docs(p, {{1, 2, 3}, {4, 5}});
  write_docs(q, {{1, 2, 3}, {4, 5}, {6, 7, 8, 9}});
  std::filesystem::copy_file(q + ".bin", p + ".bin",
                             std::filesystem::copy_options::overwrite_existing);
  const std::string e = error_of(p);
  EXPECT_NE(e.find(p + ".bin has 18 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find(p + ".idx"), std::string::npos) << e;
  EXPECT_NE(e.find("ending at byte 10"), std::string::npos) << e;
}

TEST(IndexedDataset, TruncatedOrCorruptIdxIsCaught) {
  TempDir dir;
  const std::string p = dir / "d";
  write_docs(p, {{1, 2, 3}, {4, 5}});
  const std::string good = read_bytes(p + ".idx");
  for (size_t cut : {size_t{0}, size_t{20}, good.size() - 1}) {
    std::ofstream(p + ".idx", std::ios::binary) << good.substr(0, cut);
    const std::string e = error_of(p);
    EXPECT_NE(e.find(p + ".idx is truncated"), std::string::npos) << cut << ": " << e;
  }
  std::string bad = good;
  bad[0] = 'X';
  std::ofstream(p + ".idx", std::ios::binary) << bad;
  EXPECT_NE(error_of(p).find("magic"), std::string::npos);
  bad = good;
  bad[17] = 7;  // float32
  std::ofstream(p + ".idx", std::ios::binary) << bad;
  EXPECT_NE(error_of(p).find("dtype code 7"), std::string::npos);
  bad = good;
  int32_t huge = 1000;
  std::memcpy(bad.data() + 34, &huge, 4);  // first length points past the .bin
  std::ofstream(p + ".idx", std::ios::binary) << bad;
  EXPECT_NE(error_of(p).find("truncated"), std::string::npos);
}

TEST(IndexedDataset, DtypeForVocabFollowsMegatron) {
  EXPECT_EQ(dtype_for_vocab(50257), TokenDType::kUInt16);
  EXPECT_EQ(dtype_for_vocab(65499), TokenDType::kUInt16);
  EXPECT_EQ(dtype_for_vocab(65500), TokenDType::kInt32);
}

}  // namespace
}  // namespace tripod::data
