// Where today's Megatron-Core builds its datasets differently from a naive
// reading, each checked against hand counts:
//  - split boundaries at round(cumulative share x N), half to even (every
//    expected value below was also printed by numpy 1.24 with Megatron-Core's
//    formulas: np.sum order, the cumulative shares, int(round(x * N)))
//    (blended_megatron_dataset_config.py convert_split_vector_to_split_matrix,
//    blended_megatron_dataset_builder.py _build_megatron_dataset_splits);
//  - a split shorter than one sample runs more epochs (gpt_dataset.py
//    _get_num_epochs);
//  - a blend holds sum(ceil(N x w)) samples and a weighted single prefix is a
//    blend whose part has 0.5% surplus (_get_size_per_split_per_dataset);
//  - the vocab check reads the ids present, not the file's dtype.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <set>

#include "base/error.h"
#include "data/gpt_dataset.h"
#include "test_util.h"

namespace tripod::data {
namespace {

using testing::TempDir;
using testing::write_docs;

// Document d holds `size` tokens, token k of it is 10*d + k + offset.
std::vector<std::vector<int32_t>> docs_of(const std::vector<int32_t>& sizes, int32_t offset = 0) {
  std::vector<std::vector<int32_t>> docs;
  for (size_t d = 0; d < sizes.size(); ++d) {
    docs.emplace_back();
    for (int32_t k = 0; k < sizes[d]; ++k) docs.back().push_back(10 * static_cast<int32_t>(d) + k + offset);
  }
  return docs;
}

DataConfig config(std::vector<std::string> data_path, std::string split, int64_t T, int64_t train,
                  int64_t valid) {
  DataConfig c;
  c.data_path = std::move(data_path);
  c.split = std::move(split);
  c.seq_length = T;
  c.train_samples = train;
  c.valid_samples = valid;
  return c;
}

TEST(MegatronSplit, BoundariesAtRoundedCumulativeShares) {
  // By hand: 969,30,1 -> cumulative 0.969, 0.999, 1.0.
  //   N=49:   47.481 -> 47, 48.951 -> 49   (the pre-2023 rule gave 48, 49)
  //   N=81:   78.489 -> 78, 80.919 -> 81   (old: 79, 81)
  //   N=2500: 2422.5 -> 2422 (half to even), 2497.5 -> 2498   (old: 2423, 2498)
  //   N=12345: 11962.305 -> 11962, 12332.655 -> 12333   (old: 11963, 12333)
  //   N=1000: 969, 999 (both rules)
  EXPECT_EQ(split_document_ranges("969,30,1", 49), (std::vector<int64_t>{0, 47, 49, 49}));
  EXPECT_EQ(split_document_ranges("969,30,1", 81), (std::vector<int64_t>{0, 78, 81, 81}));
  EXPECT_EQ(split_document_ranges("969,30,1", 2500), (std::vector<int64_t>{0, 2422, 2498, 2500}));
  EXPECT_EQ(split_document_ranges("969,30,1", 12345),
            (std::vector<int64_t>{0, 11962, 12333, 12345}));
  EXPECT_EQ(split_document_ranges("969,30,1", 1000), (std::vector<int64_t>{0, 969, 999, 1000}));
  // 949,50,1 -> 0.949, 0.999.
  //   N=10: 9.49 -> 9, 9.99 -> 10   (old: 10, 10: no validation documents)
  //   N=50: 47.45 -> 47, 49.95 -> 50   (old: 48, 50)
  //   N=108: 102.492 -> 102, 107.892 -> 108   (old: 103, 108)
  EXPECT_EQ(split_document_ranges("949,50,1", 10), (std::vector<int64_t>{0, 9, 10, 10}));
  EXPECT_EQ(split_document_ranges("949,50,1", 50), (std::vector<int64_t>{0, 47, 50, 50}));
  EXPECT_EQ(split_document_ranges("949,50,1", 108), (std::vector<int64_t>{0, 102, 108, 108}));
  // A zero share is an empty range; a single weight is all train.
  EXPECT_EQ(split_document_ranges("98,0,2", 100), (std::vector<int64_t>{0, 98, 98, 100}));
  EXPECT_EQ(split_document_ranges("1", 7), (std::vector<int64_t>{0, 7, 7, 7}));
  // Every boundary is monotone and the last one is N, for any N.
  for (int64_t n = 1; n < 3000; ++n) {
    const auto r = split_document_ranges("949,50,1", n);
    ASSERT_TRUE(r[0] == 0 && r[1] <= r[2] && r[2] <= r[3] && r[3] == n) << n;
  }
}

TEST(MegatronSplit, NumpySumOrder) {
  // numpy adds 8 or more values pairwise (eight running sums), which keeps
  // eight 2^-53 that one-by-one addition to 1.0 would each round away:
  // 1 + 8 * 2^-53 = 1 + 2^-50 exactly.
  const double u = std::ldexp(1.0, -53);
  const std::array<double, 9> v{1, u, u, u, u, u, u, u, u};
  EXPECT_EQ(numpy_sum(v), 1 + std::ldexp(1.0, -50));
  EXPECT_EQ(numpy_sum(std::span<const double>(v.data(), 7)), 1.0);  // below 8: in order
}

TEST(MegatronEpochs, ASplitShorterThanOneSampleRunsMoreEpochs) {
  // 100 documents of 1 + d % 3 tokens; 969,30,1 -> valid = documents [97, 100)
  // (96.9 -> 97, 99.9 -> 100) holding 2 + 3 + 1 = 6 tokens, less than one
  // sample of 9. 10 samples need 10 * 8 + 1 = 81 tokens: 14 epochs (84
  // tokens), (84 - 1) / 8 = 10 samples; no separate last epoch (0 samples
  // per epoch).
  TempDir dir;
  std::vector<int32_t> sizes(100);
  for (int d = 0; d < 100; ++d) sizes[d] = 1 + d % 3;
  write_docs(dir / "d", docs_of(sizes));
  DatasetSplits s = build_gpt_datasets(config({dir / "d"}, "969,30,1", 8, 50, 10));
  ASSERT_TRUE(s.valid);
  const auto& v = dynamic_cast<const GPTDataset&>(*s.valid);
  EXPECT_EQ(v.indices().num_epochs, 14);
  EXPECT_EQ(v.num_samples(), 10);
  EXPECT_EQ(v.indices().doc_idx.size(), 42u);
  // Each sample is its slice of the repeated documents.
  std::vector<int32_t> stream;
  for (int32_t d : v.indices().doc_idx)
    for (int32_t k = 0; k < sizes[d]; ++k) stream.push_back(10 * d + k);
  std::vector<int32_t> x(9);
  for (int64_t j = 0; j < 10; ++j) {
    v.get(j, x.data());
    const int64_t u = v.indices().shuffle_idx[j];
    ASSERT_EQ(x, std::vector<int32_t>(stream.begin() + u * 8, stream.begin() + u * 8 + 9)) << j;
    for (int32_t t : x) ASSERT_GE(t / 10, 97);
  }
  // Documents with no tokens at all still stop with the range named.
  write_docs(dir / "z", {{1, 2, 3}, {}, {}});
  try {
    build_gpt_datasets(config({dir / "z"}, "1,2", 4, 5, 5));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("documents [1, 3) hold no tokens"), std::string::npos) << e.message();
  }
}

// Megatron's preprocess_data.py writes a record that encodes to nothing as
// an empty document: no sequence, the document index repeats
// (IndexedDatasetBuilder.add_document([], [])). Its GPTDataset splits and
// samples over sequences (numel_low_level_dataset is
// sequence_lengths.shape[0]), so the empty documents change no split, no
// sample and no order for the same seed; zero-length sequences (an .idx of
// another writer) count as documents of 0 tokens, as in build_sample_idx.
TEST(MegatronEmptyDocuments, RepeatTheDocumentIndexAndChangeNoSample) {
  TempDir dir;
  const std::vector<int32_t> sizes = {5, 3, 7, 2, 6, 4, 8, 3, 5, 9};
  const auto docs = docs_of(sizes);
  write_docs(dir / "plain", docs);
  {
    IndexedDatasetWriter w(dir / "holes", TokenDType::kUInt16);
    w.add_empty_document();
    for (size_t d = 0; d < docs.size(); ++d) {
      w.add_document(docs[d].data(), static_cast<int64_t>(docs[d].size()));
      if (d == 3) {
        w.add_empty_document();
        w.add_empty_document();
      }
    }
    w.add_empty_document();
    w.finish();
  }
  const IndexedDataset holes(dir / "holes");
  EXPECT_EQ(holes.num_sequences(), 10);
  EXPECT_EQ(holes.num_documents(), 14);
  std::vector<int64_t> index;
  for (int64_t d = 0; d <= holes.num_documents(); ++d) index.push_back(holes.document_index(d));
  EXPECT_EQ(index, (std::vector<int64_t>{0, 0, 1, 2, 3, 4, 4, 4, 5, 6, 7, 8, 9, 10, 10}));
  // The .bin and the lengths and offsets are those of the file without them.
  EXPECT_EQ(testing::read_bytes(dir / "holes.bin"), testing::read_bytes(dir / "plain.bin"));
  const std::string a = testing::read_bytes(dir / "holes.idx"), b = testing::read_bytes(dir / "plain.idx");
  EXPECT_EQ(a.substr(34, 12 * 10), b.substr(34, 12 * 10));

  const DatasetSplits p = build_gpt_datasets(config({dir / "plain"}, "8,2", 4, 12, 3));
  const DatasetSplits h = build_gpt_datasets(config({dir / "holes"}, "8,2", 4, 12, 3));
  for (const auto* pair : {&p.train, &p.valid}) {
    const auto& x = **pair;
    const auto& y = *(pair == &p.train ? h.train : h.valid);
    ASSERT_EQ(x.num_samples(), y.num_samples());
    std::vector<int32_t> u(5), v(5);
    for (int64_t j = 0; j < x.num_samples(); ++j) {
      x.get(j, u.data());
      y.get(j, v.data());
      ASSERT_EQ(u, v) << j;
    }
  }
}

TEST(MegatronBlend, HoldsTheSumOfCeiledShares) {
  TempDir dir;
  std::vector<std::string> path;
  for (int f = 0; f < 3; ++f) {
    write_docs(dir / std::to_string(f), docs_of(std::vector<int32_t>(60, 5), 1000 * f));
    path.insert(path.end(), {"1", dir / std::to_string(f)});
  }
  // w = 1/3 each: ceil(10 / 3) = 4 per dataset, 12 in all (not 10).
  DatasetSplits s = build_gpt_datasets(config(path, "1", 4, 10, 0));
  ASSERT_EQ(s.train->num_samples(), 12);
  const auto& b = dynamic_cast<const BlendedDataset&>(*s.train);
  std::array<int, 3> from{};
  for (int64_t i = 0; i < 12; ++i) ++from[static_cast<size_t>(b.dataset_index(i))];
  EXPECT_EQ(from, (std::array<int, 3>{4, 4, 4}));
  // 0.3 / 0.7 of 999: ceil(299.7) + ceil(699.3) = 300 + 700.
  DatasetSplits t = build_gpt_datasets(config({"0.3", dir / "0", "0.7", dir / "1"}, "1", 4, 999, 0));
  EXPECT_EQ(t.train->num_samples(), 1000);
}

TEST(MegatronBlend, AWeightedSinglePrefixIsABlendWithSurplus) {
  // 321 documents of 10 tokens = 3210 per epoch, T = 16. 200 samples need
  // 3201 tokens: one epoch. The blend asks its part for ceil(200 * 1.005) =
  // 201 samples, which need 3217 tokens: two epochs, the second separate.
  TempDir dir;
  write_docs(dir / "a", docs_of(std::vector<int32_t>(321, 10)));
  DatasetSplits plain = build_gpt_datasets(config({dir / "a"}, "1", 16, 200, 0));
  DatasetSplits weighted = build_gpt_datasets(config({"1.0", dir / "a"}, "1", 16, 200, 0));
  EXPECT_EQ(dynamic_cast<const GPTDataset&>(*plain.train).indices().num_epochs, 1);
  ASSERT_EQ(weighted.train->num_samples(), 200);
  auto data = std::make_shared<const IndexedDataset>(dir / "a");
  GPTIndices part = build_gpt_indices(data->sequence_lengths(), 0, 321, 16, 201, 1234);
  EXPECT_EQ(part.num_epochs, 2);
  GPTDataset want(data, "train", std::move(part), 16, 0, 321);
  std::vector<int32_t> x(17), y(17), z(17);
  int differ = 0;
  for (int64_t i = 0; i < 200; ++i) {
    weighted.train->get(i, x.data());
    want.get(i, y.data());
    ASSERT_EQ(x, y) << i;
    plain.train->get(i, z.data());
    differ += x != z;
  }
  EXPECT_GT(differ, 100);  // the surplus really changes the samples
}

TEST(MegatronVocab, AUint16FileBlendsWithAnInt32FileUnderALargeVocab) {
  TempDir dir;
  write_docs(dir / "small", docs_of(std::vector<int32_t>(50, 6)), TokenDType::kUInt16);
  write_docs(dir / "large", docs_of(std::vector<int32_t>(50, 6), 69000), TokenDType::kInt32);
  DataConfig c = config({"0.5", dir / "small", "0.5", dir / "large"}, "1", 4, 40, 0);
  c.padded_vocab_size = 70016;
  DatasetSplits s = build_gpt_datasets(c);
  std::vector<int32_t> x(5);
  std::set<bool> large;
  for (int64_t i = 0; i < s.train->num_samples(); ++i) {
    s.train->get(i, x.data());
    large.insert(x[0] >= 69000);
  }
  EXPECT_EQ(large.size(), 2u);
  // The largest id present (69000 + 10 * 49 + 5 = 69495) still decides.
  c.padded_vocab_size = 69440;
  try {
    build_gpt_datasets(c);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("token id 69495"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace tripod::data
