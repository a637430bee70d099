// Tests for data/gpt_dataset.h against independent references:
//  - numpy.random.RandomState shuffles (expected values printed by numpy
//    1.24 with the commands quoted next to them);
//  - Megatron's split arithmetic (values from Python's round());
//  - every sample equal to the hand-computed slice of the document stream;
//  - split and blend proportions, the cache and the vocab checks.
#include "data/gpt_dataset.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <set>

#include "base/error.h"
#include "test_util.h"

namespace tripod::data {
namespace {

using testing::TempDir;
using testing::write_docs;

// Document d has sizes[d] tokens, token k of it is 10*d + k (all distinct).
std::vector<std::vector<int32_t>> numbered_docs(const std::vector<int32_t>& sizes) {
  std::vector<std::vector<int32_t>> docs;
  for (size_t d = 0; d < sizes.size(); ++d) {
    docs.emplace_back();
    for (int32_t k = 0; k < sizes[d]; ++k) docs.back().push_back(10 * static_cast<int32_t>(d) + k);
  }
  return docs;
}

TEST(NumpyRandomState, ShuffleMatchesNumpy) {
  // r = np.random.RandomState(1234); a = np.arange(10); r.shuffle(a); b = np.arange(7); r.shuffle(b)
  NumpyRandomState rs(1234);
  std::vector<int> a(10), b(7);
  std::iota(a.begin(), a.end(), 0);
  std::iota(b.begin(), b.end(), 0);
  rs.shuffle(std::span<int>(a));
  rs.shuffle(std::span<int>(b));
  EXPECT_EQ(a, (std::vector<int>{7, 2, 9, 1, 0, 8, 4, 5, 6, 3}));
  EXPECT_EQ(b, (std::vector<int>{6, 4, 0, 5, 3, 2, 1}));
  // r = np.random.RandomState(5); a = np.arange(300000); r.shuffle(a)
  NumpyRandomState rs5(5);
  std::vector<int64_t> c(300000);
  std::iota(c.begin(), c.end(), 0);
  rs5.shuffle(std::span<int64_t>(c));
  EXPECT_EQ(std::vector<int64_t>(c.begin(), c.begin() + 5),
            (std::vector<int64_t>{240323, 169544, 215314, 282603, 286745}));
  EXPECT_EQ(std::vector<int64_t>(c.end() - 3, c.end()), (std::vector<int64_t>{20463, 18638, 297827}));
}

TEST(Split, MatchesMegatronRounding) {
  EXPECT_EQ(split_document_ranges("969,30,1", 1000), (std::vector<int64_t>{0, 969, 999, 1000}));
  EXPECT_EQ(split_document_ranges("1,1", 5), (std::vector<int64_t>{0, 2, 5, 5}));  // 2.5 -> 2
  EXPECT_EQ(split_document_ranges("969,30,1", 17), (std::vector<int64_t>{0, 16, 17, 17}));
  EXPECT_EQ(split_document_ranges("98,2,0", 3), (std::vector<int64_t>{0, 3, 3, 3}));
  EXPECT_THROW(split_document_ranges("a,b", 3), Error);
  EXPECT_THROW(split_document_ranges("0,0,0", 3), Error);
}

// Samples of the dataset against slices of the concatenated document stream.
void expect_samples_are_stream_slices(const GPTDataset& ds, const IndexedDataset& data,
                                      int64_t seq_length) {
  std::vector<int32_t> stream;
  for (int32_t doc : ds.indices().doc_idx) {
    std::vector<int32_t> t(static_cast<size_t>(data.length(doc)));
    data.read(doc, 0, data.length(doc), t.data());
    stream.insert(stream.end(), t.begin(), t.end());
  }
  std::vector<int32_t> got(static_cast<size_t>(seq_length + 1));
  for (int64_t j = 0; j < ds.num_samples(); ++j) {
    ds.get(j, got.data());
    const int64_t s = ds.indices().shuffle_idx[j];
    const std::vector<int32_t> want(stream.begin() + s * seq_length,
                                    stream.begin() + s * seq_length + seq_length + 1);
    ASSERT_EQ(got, want) << "sample " << j << " (unshuffled " << s << ")";
  }
}

TEST(GPTIndices, ThreeEpochsMatchMegatron) {
  // sizes [3,5,2,4,6] = 20 tokens per epoch, T = 4, 13 samples -> 3 epochs,
  // last epoch used for 4 of 4 samples: not separated. numpy:
  // r = RandomState(1234); a = np.tile(np.arange(5), 3); r.shuffle(a);
  // b = np.arange(14); r.shuffle(b)
  const std::vector<int32_t> sizes{3, 5, 2, 4, 6};
  GPTIndices r = build_gpt_indices(sizes.data(), 0, 5, 4, 13, 1234);
  EXPECT_EQ(r.num_epochs, 3);
  EXPECT_EQ(r.doc_idx, (std::vector<int32_t>{3, 1, 0, 2, 4, 2, 0, 2, 1, 4, 3, 4, 0, 1, 3}));
  EXPECT_EQ(r.shuffle_idx,
            (std::vector<int64_t>{11, 12, 4, 3, 7, 2, 1, 9, 5, 0, 8, 13, 6, 10}));
  // Stream: doc3 = 30 31 32 33, doc1 = 10 11 12 13 14, ... sample 0 = stream[0, 5).
  EXPECT_EQ(r.sample_idx[0], 0);
  EXPECT_EQ(r.sample_idx[1], 0);
  EXPECT_EQ(r.sample_idx[2], 1);  // sample 1 starts in doc1 ...
  EXPECT_EQ(r.sample_idx[3], 0);  // ... at its first token (shared with sample 0)
}

TEST(GPTIndices, SeparatesASmallLastEpoch) {
  // 10 samples: 9 from two epochs, 1 from the third (< 80% of 4): separated.
  // r = RandomState(1234); a = np.tile(np.arange(5), 2); r.shuffle(a); a2 = np.arange(5);
  // r.shuffle(a2); b = np.arange(9); r.shuffle(b); b2 = np.arange(9, 14); r.shuffle(b2)
  const std::vector<int32_t> sizes{3, 5, 2, 4, 6};
  GPTIndices r = build_gpt_indices(sizes.data(), 0, 5, 4, 10, 1234);
  EXPECT_EQ(r.num_epochs, 3);
  EXPECT_EQ(r.doc_idx, (std::vector<int32_t>{2, 2, 4, 1, 0, 3, 4, 0, 1, 3, 0, 4, 3, 2, 1}));
  EXPECT_EQ(r.shuffle_idx,
            (std::vector<int64_t>{7, 3, 5, 1, 4, 8, 0, 2, 6, 13, 10, 12, 9, 11}));
}

TEST(GPTDataset, EverySampleIsTheRightSlice) {
  TempDir dir;
  const std::string p = dir / "d";
  write_docs(p, numbered_docs({3, 5, 2, 4, 6}));
  auto data = std::make_shared<const IndexedDataset>(p);
  GPTDataset ds(data, "train", build_gpt_indices(data->sequence_lengths(), 0, 5, 4, 13, 1234), 4,
                0, 5);
  ASSERT_EQ(ds.num_samples(), 14);
  std::vector<int32_t> s(5);
  ds.get(9, s.data());  // shuffle_idx[9] = 0: the first 5 tokens of doc3 then doc1
  EXPECT_EQ(s, (std::vector<int32_t>{30, 31, 32, 33, 10}));
  expect_samples_are_stream_slices(ds, *data, 4);
  // Longer samples spanning several documents, zero-length documents included.
  write_docs(dir / "e", numbered_docs({1, 0, 7, 2, 9, 3, 0, 4}));
  auto e = std::make_shared<const IndexedDataset>(dir / "e");
  for (int64_t T : {1, 3, 8, 13}) {
    GPTDataset de(e, "train", build_gpt_indices(e->sequence_lengths(), 0, 8, T, 40, 7), T, 0, 8);
    EXPECT_GE(de.num_samples(), 40);
    expect_samples_are_stream_slices(de, *e, T);
  }
}

// get_range (context parallelism's chunks) reads exactly get()'s tokens
// [begin, begin + count), across document boundaries and empty documents.
TEST(GPTDataset, RangeIsTheSamplesSlice) {
  TempDir dir;
  write_docs(dir / "e", numbered_docs({1, 0, 7, 2, 9, 3, 0, 4}));
  auto e = std::make_shared<const IndexedDataset>(dir / "e");
  const int64_t T = 8;
  GPTDataset de(e, "train", build_gpt_indices(e->sequence_lengths(), 0, 8, T, 40, 7), T, 0, 8);
  std::vector<int32_t> all(T + 1);
  for (int64_t i = 0; i < de.num_samples(); ++i) {
    de.get(i, all.data());
    for (int64_t begin = 0; begin <= T; ++begin)
      for (int64_t count = 0; begin + count <= T + 1; ++count) {
        std::vector<int32_t> part(static_cast<size_t>(count), -1);
        de.get_range(i, begin, count, part.data());
        ASSERT_EQ(part, std::vector<int32_t>(all.begin() + begin, all.begin() + begin + count))
            << "sample " << i << " [" << begin << ", " << begin + count << ")";
      }
  }
}

DataConfig config_for(std::vector<std::string> data_path, int64_t T, int64_t train, int64_t valid) {
  DataConfig c;
  c.data_path = std::move(data_path);
  c.seq_length = T;
  c.train_samples = train;
  c.valid_samples = valid;
  c.split = "969,30,1";
  return c;
}

TEST(GPTDataset, SplitsUseDisjointDocumentRanges) {
  TempDir dir;
  std::vector<int32_t> sizes(1000);
  for (int i = 0; i < 1000; ++i) sizes[i] = 1 + i % 5;
  auto docs = numbered_docs(sizes);  // token / 10 = document id
  write_docs(dir / "d", docs, TokenDType::kInt32);
  DatasetSplits s = build_gpt_datasets(config_for({dir / "d"}, 8, 500, 20));
  ASSERT_TRUE(s.train && s.valid);
  EXPECT_FALSE(s.test);  // no test samples requested
  std::vector<int32_t> x(9);
  std::set<int32_t> train_docs, valid_docs;
  for (int64_t i = 0; i < s.train->num_samples(); ++i) {
    s.train->get(i, x.data());
    for (int32_t t : x) train_docs.insert(t / 10);
  }
  for (int64_t i = 0; i < s.valid->num_samples(); ++i) {
    s.valid->get(i, x.data());
    for (int32_t t : x) valid_docs.insert(t / 10);
  }
  EXPECT_EQ(*train_docs.begin(), 0);
  EXPECT_EQ(*train_docs.rbegin(), 968);
  EXPECT_EQ(train_docs.size(), 969u);  // one epoch of 2907 tokens covers every document
  EXPECT_EQ(*valid_docs.begin(), 969);
  EXPECT_EQ(*valid_docs.rbegin(), 998);
}

TEST(GPTDataset, BlendFollowsTheWeights) {
  TempDir dir;
  std::vector<int32_t> sizes(200, 7);
  write_docs(dir / "a", numbered_docs(sizes), TokenDType::kInt32);  // ids < 2000
  auto b = numbered_docs(sizes);
  for (auto& d : b)
    for (auto& t : d) t += 5000;
  write_docs(dir / "b", b, TokenDType::kInt32);
  DatasetSplits s = build_gpt_datasets(config_for({"0.3", dir / "a", "0.7", dir / "b"}, 6, 1000, 0));
  ASSERT_EQ(s.train->num_samples(), 1000);
  std::vector<int32_t> x(7);
  int64_t from_a = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    s.train->get(i, x.data());
    const bool a = x[0] < 5000;
    for (int32_t t : x) ASSERT_EQ(t < 5000, a) << "sample " << i << " mixes datasets";
    from_a += a;
    // Every prefix tracks the weights within one sample.
    ASSERT_LE(std::abs(static_cast<double>(from_a) - 0.3 * static_cast<double>(i + 1)), 1.0) << i;
  }
  EXPECT_EQ(from_a, 300);
}

TEST(GPTDataset, IndexIsCachedAndRebuiltWhenDataChanges) {
  TempDir dir;
  const std::string p = dir / "d";
  write_docs(p, numbered_docs({3, 5, 2, 4, 6}));
  auto count_caches = [&] {
    int n = 0;
    for (auto& e : std::filesystem::directory_iterator(dir.path()))
      n += e.path().extension() == ".tripod-index";
    return n;
  };
  DataConfig c = config_for({p}, 4, 13, 0);
  c.split = "1";
  std::vector<int32_t> first(5), again(5);
  build_gpt_datasets(c).train->get(0, first.data());
  EXPECT_EQ(count_caches(), 1);
  build_gpt_datasets(c).train->get(0, again.data());
  EXPECT_EQ(first, again);
  EXPECT_EQ(count_caches(), 1);
  // Rewrite the data with other documents: the cache must not be reused.
  write_docs(p, numbered_docs({6, 4, 2, 5, 3}));
  DatasetSplits s = build_gpt_datasets(c);
  auto data = std::make_shared<const IndexedDataset>(p);
  GPTIndices fresh = build_gpt_indices(data->sequence_lengths(), 0, 5, 4, 13, 1234);
  EXPECT_EQ(dynamic_cast<const GPTDataset&>(*s.train).indices().sample_idx, fresh.sample_idx);
  EXPECT_EQ(count_caches(), 1);
}

TEST(GPTDataset, ResumeFromConsumedSamplesSeesTheSameSamples) {
  // A run that consumed N samples and a fresh process (indices from the cache)
  // that starts at N read the same samples: get(k) is a pure function of k.
  TempDir dir;
  std::vector<int32_t> sizes(300);
  for (int i = 0; i < 300; ++i) sizes[i] = 1 + (i * 7) % 11;
  write_docs(dir / "d", numbered_docs(sizes), TokenDType::kInt32);
  DataConfig c = config_for({dir / "d"}, 16, 200, 0);
  DatasetSplits first = build_gpt_datasets(c);
  std::vector<std::vector<int32_t>> seen;
  for (int64_t k = 0; k < 200; ++k) {
    seen.emplace_back(17);
    first.train->get(k, seen.back().data());
  }
  DatasetSplits resumed = build_gpt_datasets(c);
  std::vector<int32_t> x(17);
  for (int64_t k = 120; k < 200; ++k) {
    resumed.train->get(k, x.data());
    ASSERT_EQ(x, seen[k]) << k;
  }
}

TEST(GPTDataset, DataPathWithAnExtensionGetsAHint) {
  try {
    IndexedDataset d("/some/where/corpus_text_document.bin");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.hint().find("--data-path /some/where/corpus_text_document"), std::string::npos);
  }
}

TEST(GPTDataset, VocabMismatchIsCaughtBeforeTraining) {
  TempDir dir;
  write_docs(dir / "d", {{1, 2, 600, 4, 5, 6}});
  DataConfig c = config_for({dir / "d"}, 2, 0, 0);
  c.split = "1";
  c.padded_vocab_size = 512;
  try {
    build_gpt_datasets(c);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("token id 600"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(dir / "d.bin"), std::string::npos) << e.message();
  }
  c.padded_vocab_size = 640;
  EXPECT_NO_THROW(build_gpt_datasets(c));
  // A uint16 file under a vocabulary above 65,536: the ids present decide.
  c.padded_vocab_size = 70016;
  EXPECT_NO_THROW(build_gpt_datasets(c));
}

TEST(GPTDataset, BadDataPathIsAClearError) {
  EXPECT_THROW(build_gpt_datasets(config_for({"0.5", "a", "b"}, 4, 10, 0)), Error);
  EXPECT_THROW(build_gpt_datasets(config_for({"x", "a", "0.5", "b"}, 4, 10, 0)), Error);
}

}  // namespace
}  // namespace tripod::data
