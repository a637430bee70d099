// Implementation of data/gpt_dataset.h: Megatron-Core's document, sample and
// shuffle indices, the GPT and blended datasets. The on-disk cache and the
// builder that reads DataConfig live in build_indexed.cpp.
// References: megatron/core/datasets/gpt_dataset.py
// (_build_document_sample_shuffle_indices), helpers.cpp (build_sample_idx,
// build_blending_indices), utils.py (_get_split_indices).
#include "data/gpt_dataset.h"

#include <cmath>
#include <numeric>
#include <sstream>

#include "base/error.h"

namespace tripod::data {

// ---- numpy RandomState ----

NumpyRandomState::NumpyRandomState(uint32_t seed) {
  // init_genrand, as numpy's mt19937_seed for an integer seed.
  mt_[0] = seed;
  for (int i = 1; i < 624; ++i)
    mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  pos_ = 624;
}

uint32_t NumpyRandomState::next_uint32() {
  if (pos_ >= 624) {
    for (int i = 0; i < 624; ++i) {
      const uint32_t y = (mt_[i] & 0x80000000u) | (mt_[(i + 1) % 624] & 0x7fffffffu);
      mt_[i] = mt_[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    pos_ = 0;
  }
  uint32_t y = mt_[pos_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint64_t NumpyRandomState::random_interval(uint64_t max) {
  // numpy's masked rejection sampling (distributions.c random_interval).
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int s = 1; s <= 32; s *= 2) mask |= mask >> s;
  uint64_t v;
  if (max <= 0xffffffffull) {
    while ((v = (next_uint32() & mask)) > max) {
    }
  } else {
    do {
      const uint64_t hi = next_uint32();
      v = ((hi << 32) | next_uint32()) & mask;
    } while (v > max);
  }
  return v;
}

// ---- split ----

std::vector<int64_t> split_document_ranges(const std::string& split, int64_t num_documents) {
  std::vector<double> w;
  std::stringstream ss(split);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    TRIPOD_CHECK_HINT(end != item.c_str() && *end == '\0' && v >= 0, "e.g. --split 969,30,1",
                      "--split '{}': '{}' is not a non-negative number", split, item);
    w.push_back(v);
  }
  TRIPOD_CHECK_HINT(!w.empty() && w.size() <= 3, "e.g. --split 969,30,1",
                    "--split '{}' must have 1 to 3 comma-separated weights", split);
  w.resize(3, 0.0);
  const double total = numpy_sum(w);
  TRIPOD_CHECK_HINT(total > 0, "e.g. --split 969,30,1", "--split '{}' sums to zero", split);
  // Megatron-Core (convert_split_vector_to_split_matrix and
  // _build_megatron_dataset_splits): the normalised shares are accumulated in
  // order and boundary i is int(round(cumulative_i * N)); Python's round
  // rounds half to even, as nearbyint does by default. A zero share leaves the
  // cumulative sum unchanged, hence an empty range. (Megatron before late 2023
  // rounded each share and shifted the last boundary; see docs/data.md.)
  std::vector<int64_t> idx{0};
  double cumulative = 0;
  for (double x : w) {
    cumulative += x / total;
    idx.push_back(static_cast<int64_t>(std::nearbyint(cumulative * static_cast<double>(num_documents))));
  }
  return idx;
}

double numpy_sum(std::span<const double> v) {
  // numpy's pairwise_sum for up to 128 elements: sequential below 8, else
  // eight running sums combined as ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)) plus
  // the remainder in order. Longer inputs split in halves (multiples of 8).
  const size_t n = v.size();
  if (n < 8) {
    double r = 0;
    for (double x : v) r += x;
    return r;
  }
  if (n > 128) {
    size_t h = n / 2;
    h -= h % 8;
    return numpy_sum(v.first(h)) + numpy_sum(v.subspan(h));
  }
  double r[8];
  for (size_t j = 0; j < 8; ++j) r[j] = v[j];
  size_t i = 8;
  for (; i < n - n % 8; i += 8)
    for (size_t j = 0; j < 8; ++j) r[j] += v[i + j];
  double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
  for (; i < n; ++i) res += v[i];
  return res;
}

std::vector<double> numpy_normalize(std::span<const double> v) {
  const double total = numpy_sum(v);
  std::vector<double> r(v.begin(), v.end());
  for (double& x : r) x /= total;
  return r;
}

// ---- index construction ----

namespace {

std::vector<int32_t> shuffled_epochs(int64_t doc_begin, int64_t doc_end, int64_t epochs,
                                     NumpyRandomState& rs) {
  std::vector<int32_t> v;
  v.reserve(static_cast<size_t>((doc_end - doc_begin) * epochs));
  for (int64_t e = 0; e < epochs; ++e)
    for (int64_t d = doc_begin; d < doc_end; ++d) v.push_back(static_cast<int32_t>(d));
  rs.shuffle(std::span<int32_t>(v));
  return v;
}

// Megatron's build_sample_idx with add_extra_token = 1. Returns
// (num_samples + 1, 2) pairs: sample i starts at token offset
// sample_idx[2i+1] of document doc_idx[sample_idx[2i]].
std::vector<int64_t> build_sample_idx(const int32_t* sizes, const std::vector<int32_t>& doc_idx,
                                      int64_t seq_length, int64_t num_samples) {
  std::vector<int64_t> s(static_cast<size_t>(2 * (num_samples + 1)));
  int64_t di = 0, offset = 0;
  s[0] = 0;
  s[1] = 0;
  for (int64_t i = 1; i <= num_samples; ++i) {
    int64_t remaining = seq_length + 1;
    while (remaining != 0) {
      const int64_t doc_len = sizes[doc_idx[di]] - offset;
      remaining -= doc_len;
      if (remaining <= 0) {
        offset += remaining + doc_len - 1;  // the last token is shared with the next sample
        remaining = 0;
      } else {
        TRIPOD_CHECK(di + 1 < static_cast<int64_t>(doc_idx.size()),
                     "internal: ran out of documents at sample {} of {}", i, num_samples);
        ++di;
        offset = 0;
      }
    }
    s[2 * i] = di;
    s[2 * i + 1] = offset;
  }
  return s;
}

}  // namespace

GPTIndices build_gpt_indices(const int32_t* sizes, int64_t doc_begin, int64_t doc_end,
                             int64_t seq_length, int64_t num_samples, uint32_t seed) {
  TRIPOD_CHECK(doc_end > doc_begin, "empty document range [{}, {})", doc_begin, doc_end);
  TRIPOD_CHECK(seq_length >= 1, "--seq-length must be positive, got {}", seq_length);
  int64_t tokens_per_epoch = 0;
  for (int64_t d = doc_begin; d < doc_end; ++d) tokens_per_epoch += sizes[d];
  GPTIndices r;
  r.num_epochs = 1;
  if (num_samples > 0) {
    // As Megatron's _get_num_epochs: documents shorter in total than one
    // sample are simply repeated over more epochs.
    TRIPOD_CHECK_HINT(tokens_per_epoch > 0, "use more data or another --split",
                      "documents [{}, {}) hold no tokens", doc_begin, doc_end);
    while (r.num_epochs * tokens_per_epoch < num_samples * seq_length + 1) ++r.num_epochs;
  } else {
    TRIPOD_CHECK_HINT(tokens_per_epoch > seq_length, "use more data or a smaller --seq-length",
                      "documents [{}, {}) hold {} tokens, not enough for one sample of {} tokens",
                      doc_begin, doc_end, tokens_per_epoch, seq_length + 1);
  }

  // Megatron separates the last epoch when less than 80% of it is used, so
  // that its few samples are not drawn from all over the previous epochs.
  bool separate_last = false;
  int64_t samples_sans_last = 0;
  if (r.num_epochs > 1) {
    samples_sans_last = ((r.num_epochs - 1) * tokens_per_epoch - 1) / seq_length;
    const int64_t from_last = num_samples - samples_sans_last;
    const int64_t per_epoch = (tokens_per_epoch - 1) / seq_length;
    TRIPOD_CHECK(from_last >= 0 && from_last <= per_epoch + 1, "internal: epoch arithmetic");
    separate_last = from_last < static_cast<int64_t>(0.80 * static_cast<double>(per_epoch));
  }

  NumpyRandomState rs(seed);
  if (!separate_last) {
    r.doc_idx = shuffled_epochs(doc_begin, doc_end, r.num_epochs, rs);
  } else {
    r.doc_idx = shuffled_epochs(doc_begin, doc_end, r.num_epochs - 1, rs);
    const auto last = shuffled_epochs(doc_begin, doc_end, 1, rs);
    r.doc_idx.insert(r.doc_idx.end(), last.begin(), last.end());
  }
  const int64_t total = (r.num_epochs * tokens_per_epoch - 1) / seq_length;
  r.sample_idx = build_sample_idx(sizes, r.doc_idx, seq_length, total);

  const int64_t first = separate_last ? samples_sans_last : total;
  r.shuffle_idx.resize(static_cast<size_t>(total));
  std::iota(r.shuffle_idx.begin(), r.shuffle_idx.end(), int64_t{0});
  rs.shuffle(std::span<int64_t>(r.shuffle_idx.data(), static_cast<size_t>(first)));
  if (first < total)
    rs.shuffle(std::span<int64_t>(r.shuffle_idx.data() + first, static_cast<size_t>(total - first)));
  return r;
}

// ---- GPTDataset ----

GPTDataset::GPTDataset(std::shared_ptr<const IndexedDataset> data, std::string split_name,
                       GPTIndices indices, int64_t seq_length, int64_t doc_begin, int64_t doc_end)
    : data_(std::move(data)), split_name_(std::move(split_name)), indices_(std::move(indices)),
      seq_length_(seq_length), doc_begin_(doc_begin), doc_end_(doc_end) {}

int64_t GPTDataset::num_samples() const { return static_cast<int64_t>(indices_.shuffle_idx.size()); }

void GPTDataset::get(int64_t index, int32_t* out) const {
  TRIPOD_CHECK(index >= 0 && index < num_samples(), "{} sample {} out of range [0, {})",
               split_name_, index, num_samples());
  const int64_t i = indices_.shuffle_idx[index];
  const int64_t* s = indices_.sample_idx.data();
  const int64_t beg = s[2 * i], beg_off = s[2 * i + 1];
  const int64_t end = s[2 * i + 2], end_off = s[2 * i + 3];
  int64_t n = 0;
  for (int64_t k = beg; k <= end; ++k) {
    const int32_t doc = indices_.doc_idx[k];
    const int64_t off = k == beg ? beg_off : 0;
    const int64_t stop = k == end ? end_off + 1 : data_->length(doc);
    data_->read(doc, off, stop - off, out + n);
    n += stop - off;
  }
  TRIPOD_CHECK(n == seq_length_ + 1, "internal: sample {} has {} tokens, expected {}", index, n,
               seq_length_ + 1);
}

// As get(), reading only the documents' tokens that fall in [begin, begin + count).
void GPTDataset::get_range(int64_t index, int64_t begin, int64_t count, int32_t* out) const {
  TRIPOD_CHECK(index >= 0 && index < num_samples() && begin >= 0 && count >= 0 && begin + count <= seq_length_ + 1,
               "{} sample {} tokens [{}, {}) out of range", split_name_, index, begin, begin + count);
  const int64_t i = indices_.shuffle_idx[index];
  const int64_t* s = indices_.sample_idx.data();
  const int64_t beg = s[2 * i], beg_off = s[2 * i + 1];
  const int64_t end = s[2 * i + 2], end_off = s[2 * i + 3];
  int64_t at = 0;  // sample position of the current document piece's first token
  for (int64_t k = beg; k <= end && at < begin + count; ++k) {
    const int32_t doc = indices_.doc_idx[k];
    const int64_t off = k == beg ? beg_off : 0;
    const int64_t stop = k == end ? end_off + 1 : data_->length(doc);
    const int64_t lo = std::max(at, begin), hi = std::min(at + stop - off, begin + count);
    if (lo < hi) data_->read(doc, off + (lo - at), hi - lo, out + (lo - begin));
    at += stop - off;
  }
}

std::string GPTDataset::describe() const {
  return fmt::format("{} split of {}: documents [{}, {}), {} epoch(s), {} samples of {} tokens",
                     split_name_, data_->prefix(), doc_begin_, doc_end_, indices_.num_epochs,
                     num_samples(), seq_length_ + 1);
}

// ---- BlendedDataset ----

BlendedDataset::BlendedDataset(std::vector<std::unique_ptr<TokenDataset>> datasets,
                               std::vector<double> weights, int64_t size)
    : datasets_(std::move(datasets)), weights_(std::move(weights)), size_(size) {
  TRIPOD_CHECK(!datasets_.empty() && datasets_.size() == weights_.size(),
               "blend of {} datasets with {} weights", datasets_.size(), weights_.size());
  const size_t k = datasets_.size();
  std::vector<int64_t> current(k, 0);
  dataset_index_.resize(static_cast<size_t>(size));
  dataset_sample_index_.resize(static_cast<size_t>(size));
  // Greedy: each sample goes to the dataset furthest behind its share.
  for (int64_t i = 0; i < size; ++i) {
    const double x = std::max(static_cast<double>(i), 1.0);
    size_t best = 0;
    double best_err = weights_[0] * x - static_cast<double>(current[0]);
    for (size_t d = 1; d < k; ++d) {
      const double err = weights_[d] * x - static_cast<double>(current[d]);
      if (err > best_err) {
        best_err = err;
        best = d;
      }
    }
    dataset_index_[i] = static_cast<int32_t>(best);
    dataset_sample_index_[i] = current[best]++;
  }
  for (size_t d = 0; d < k; ++d)
    TRIPOD_CHECK(current[d] <= datasets_[d]->num_samples(),
                 "blend needs {} samples of dataset {} which has {}", current[d], d,
                 datasets_[d]->num_samples());
}

void BlendedDataset::get(int64_t index, int32_t* out) const {
  TRIPOD_CHECK(index >= 0 && index < size_, "blended sample {} out of range [0, {})", index, size_);
  datasets_[dataset_index_[index]]->get(dataset_sample_index_[index], out);
}

void BlendedDataset::get_range(int64_t index, int64_t begin, int64_t count, int32_t* out) const {
  TRIPOD_CHECK(index >= 0 && index < size_, "blended sample {} out of range [0, {})", index, size_);
  datasets_[dataset_index_[index]]->get_range(dataset_sample_index_[index], begin, count, out);
}

std::string BlendedDataset::describe() const {
  std::string s = fmt::format("blend of {} datasets, {} samples:", datasets_.size(), size_);
  for (size_t d = 0; d < datasets_.size(); ++d)
    s += fmt::format(" [{:.3f}] {};", weights_[d], datasets_[d]->describe());
  return s;
}

// ---- --data-path ----

void parse_data_path(const std::vector<std::string>& data_path, std::vector<double>* weights,
                     std::vector<std::string>* prefixes) {
  weights->clear();
  prefixes->clear();
  TRIPOD_CHECK_HINT(!data_path.empty(), "pass --data-path PREFIX or --data-path W1 P1 W2 P2",
                    "--data-path is empty");
  if (data_path.size() == 1) {
    weights->push_back(1.0);
    prefixes->push_back(data_path[0]);
    return;
  }
  TRIPOD_CHECK_HINT(data_path.size() % 2 == 0, "e.g. --data-path 0.3 A_text_document 0.7 B_text_document",
                    "--data-path with several datasets needs weight/prefix pairs, got {} values",
                    data_path.size());
  for (size_t i = 0; i < data_path.size(); i += 2) {
    char* end = nullptr;
    const double w = std::strtod(data_path[i].c_str(), &end);
    TRIPOD_CHECK_HINT(end != data_path[i].c_str() && *end == '\0' && w > 0,
                      "e.g. --data-path 0.3 A_text_document 0.7 B_text_document",
                      "--data-path: '{}' is not a positive weight", data_path[i]);
    weights->push_back(w);
    prefixes->push_back(data_path[i + 1]);
  }
  *weights = numpy_normalize(*weights);
}

}  // namespace tripod::data
