// build_indexed_gpt_datasets: opens the --data-path files, checks them
// against the model's vocabulary, splits them, builds (or loads from the
// cache) Megatron's sample indices and blends them.
//
// NOTE [GPT index cache]
// Building doc_idx/sample_idx/shuffle_idx is O(tokens / seq_length) and is
// done once per (data, split, seq_length, num_samples, seed). The result is
// stored as
//   <folder>/<name of the prefix>.<split>-<hash of the parameters>.tripod-index
// holding a description (parameters + size and mtime of .bin/.idx) and the
// three arrays. A cache whose description differs (the data was rewritten)
// is rebuilt in place; it is written atomically (temp + fsync + rename), so
// ranks racing on it all read a complete file. The largest token id of each
// file is cached the same way (<prefix>.tripod-maxid) for the vocab check.
// The folder (cache_folder below): --data-cache-path DIR (Megatron's flag)
// when given; else the data's own folder when this process may write there;
// else a per-user folder, ${XDG_CACHE_HOME:-$HOME/.cache}/tripod/index-cache,
// with a log line, so read-only data trains (and a cache found beside the
// data, written when it was still writable, is used first).
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <iterator>

#include "base/error.h"
#include "base/log.h"
#include "base/temp_files.h"
#include "data/gpt_dataset.h"

namespace tripod::data {
namespace {

constexpr char kCacheMagic[8] = {'T', 'R', 'P', 'G', 'I', 'D', 'X', '1'};
const char* const kSplitNames[3] = {"train", "valid", "test"};
constexpr int64_t kStaleTemporaryAge = 600;  // seconds; a cache is written in far less

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool read_file(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return static_cast<bool>(f) || f.eof();
}

template <typename T>
void append(std::string* s, const T* p, size_t n) {
  s->append(reinterpret_cast<const char*>(p), n * sizeof(T));
}

// Reads a T[n] at *pos; false when the buffer is too short.
template <typename T>
bool take(const std::string& s, size_t* pos, std::vector<T>* v, int64_t n) {
  if (n < 0 || *pos + static_cast<size_t>(n) * sizeof(T) > s.size()) return false;
  v->resize(static_cast<size_t>(n));
  std::memcpy(v->data(), s.data() + *pos, static_cast<size_t>(n) * sizeof(T));
  *pos += static_cast<size_t>(n) * sizeof(T);
  return true;
}

bool load_cache(const std::string& path, const std::string& description, GPTIndices* r) {
  std::string s;
  if (!read_file(path, &s) || s.size() < 16 || std::memcmp(s.data(), kCacheMagic, 8) != 0)
    return false;
  size_t pos = 8;
  std::vector<int64_t> head;
  if (!take(s, &pos, &head, 1) || head[0] != static_cast<int64_t>(description.size()) ||
      pos + description.size() > s.size() || s.compare(pos, description.size(), description) != 0)
    return false;
  pos += description.size();
  if (!take(s, &pos, &head, 4)) return false;
  r->num_epochs = head[0];
  return take(s, &pos, &r->doc_idx, head[1]) && take(s, &pos, &r->sample_idx, head[2]) &&
         take(s, &pos, &r->shuffle_idx, head[3]) && pos == s.size();
}

void save_cache(const std::string& path, const std::string& description, const GPTIndices& r) {
  std::string s(kCacheMagic, 8);
  const int64_t head[1] = {static_cast<int64_t>(description.size())};
  append(&s, head, 1);
  s += description;
  const int64_t counts[4] = {r.num_epochs, static_cast<int64_t>(r.doc_idx.size()),
                             static_cast<int64_t>(r.sample_idx.size()),
                             static_cast<int64_t>(r.shuffle_idx.size())};
  append(&s, counts, 4);
  append(&s, r.doc_idx.data(), r.doc_idx.size());
  append(&s, r.sample_idx.data(), r.sample_idx.size());
  append(&s, r.shuffle_idx.data(), r.shuffle_idx.size());
  // Cache temporaries of killed runs; only old ones, as ranks of other hosts may write here right now.
  remove_stale_temporaries(std::filesystem::path(path).parent_path().string(), kStaleTemporaryAge);
  try {
    write_file_atomic(path, s.data(), static_cast<int64_t>(s.size()));
  } catch (const Error& e) {
    log::warn("could not cache the dataset index ({}); it will be rebuilt next time",
              e.message());
  }
}

// Where the caches of `prefix` go: the data's folder, or another (the
// files are then named by the prefix's base name).
struct CacheFolder {
  std::string dir;    // "" when nothing can be cached (every candidate is read-only)
  bool beside = true; // the data's own folder: names as before (<prefix>.<...>)
  std::string path(const std::string& prefix, const std::string& suffix) const {
    if (beside) return prefix + suffix;
    return (std::filesystem::path(dir) / std::filesystem::path(prefix).filename()).string() + suffix;
  }
};

std::string folder_of(const std::string& prefix) {
  const std::string d = std::filesystem::path(prefix).parent_path().string();
  return d.empty() ? "." : d;
}

std::string per_user_cache_folder() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/tripod/index-cache";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/tripod/index-cache";
  return fmt::format("/tmp/tripod-index-cache-{}", ::getuid());
}

// "" when this process may create files in dir (creating it if missing), else why not.
std::string writable(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return ec.message();
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return std::strerror(errno);
  return {};
}

CacheFolder cache_folder(const std::string& prefix, const DataConfig& config) {
  if (!config.data_cache_path.empty()) {
    const std::string why = writable(config.data_cache_path);
    TRIPOD_CHECK_HINT(why.empty(), "pass a folder this user may write to --data-cache-path (or drop the flag)",
                      "--data-cache-path {}: cannot write index caches there: {}", config.data_cache_path, why);
    return {config.data_cache_path, false};
  }
  const std::string data_dir = folder_of(prefix);
  const std::string why = ::access(data_dir.c_str(), W_OK | X_OK) == 0 ? "" : std::strerror(errno);
  if (why.empty()) return {data_dir, true};
  const std::string user = per_user_cache_folder();
  const std::string user_why = writable(user);
  if (!user_why.empty()) {
    log::warn("data: neither the data's folder {} ({}) nor {} ({}) is writable: the dataset index is rebuilt "
              "at every start; pass --data-cache-path DIR to keep it",
              data_dir, why, user, user_why);
    return {"", false};
  }
  log::info("data: the data's folder {} is not writable ({}): index caches go to {} (--data-cache-path "
            "chooses the folder)",
            data_dir, why, user);
  return {user, false};
}

int64_t cached_max_token_id(const IndexedDataset& data, const CacheFolder& folder) {
  // In a shared folder the name also carries the prefix's hash: two data
  // folders may hold files of the same name.
  const std::string suffix =
      folder.beside ? ".tripod-maxid"
                    : fmt::format("-{:016x}.tripod-maxid",
                                  fnv1a(std::filesystem::absolute(data.prefix()).lexically_normal().string()));
  const std::string id = data.identity();
  std::string s;
  for (const std::string& path : {data.prefix() + ".tripod-maxid", folder.path(data.prefix(), suffix)}) {
    if (read_file(path, &s)) {
      const auto sp = s.find(' ');
      if (sp != std::string::npos && s.compare(0, sp, id) == 0) return std::stoll(s.substr(sp + 1));
    }
  }
  const int64_t m = data.max_token_id();
  if (folder.dir.empty()) return m;
  const std::string line = fmt::format("{} {}\n", id, m);
  try {
    write_file_atomic(folder.path(data.prefix(), suffix), line.data(), static_cast<int64_t>(line.size()));
  } catch (const Error&) {
    // An unwritable folder only costs the scan next time.
  }
  return m;
}

// The ids present, not the file's dtype, decide: a uint16 file whose ids all
// fit may be blended with an int32 file under a vocabulary above 65,536.
void check_vocab(const IndexedDataset& data, const CacheFolder& folder, int64_t padded_vocab_size) {
  if (padded_vocab_size <= 0) return;
  const int64_t max_id = cached_max_token_id(data, folder);
  TRIPOD_CHECK_HINT(
      max_id < padded_vocab_size,
      fmt::format("the data and the model use different tokenizers: pass the tokenizer files used by "
                  "tripod preprocess (a vocabulary of more than {} tokens), or --vocab-size {} or more "
                  "without tokenizer files, or re-run preprocess with this model's tokenizer",
                  max_id, max_id + 1),
      "{} contains token id {} but the model's padded vocabulary has only {} entries (ids 0..{})",
      bin_path(data.prefix()), max_id, padded_vocab_size, padded_vocab_size - 1);
}

std::unique_ptr<GPTDataset> build_split(std::shared_ptr<const IndexedDataset> data, const CacheFolder& folder,
                                        int split, int64_t doc_begin, int64_t doc_end,
                                        const DataConfig& config, int64_t num_samples) {
  const std::string params =
      fmt::format("tripod-gpt-index v1; prefix={}; split={} '{}' docs [{}, {}); seq_length={}; "
                  "num_samples={}; seed={}",
                  data->prefix(), kSplitNames[split], config.split, doc_begin, doc_end,
                  config.seq_length, num_samples, config.seed);
  const std::string description = params + "; data=" + data->identity();
  const std::string suffix = fmt::format(".{}-{:016x}.tripod-index", kSplitNames[split], fnv1a(params));
  const std::string path = folder.path(data->prefix(), suffix);
  GPTIndices indices;
  // A cache beside the data (written while it was writable) serves a read-only copy too.
  if (!load_cache(path, description, &indices) &&
      (folder.beside || !load_cache(data->prefix() + suffix, description, &indices))) {
    indices = build_gpt_indices(data->sequence_lengths(), doc_begin, doc_end, config.seq_length,
                                num_samples, static_cast<uint32_t>(config.seed));
    if (!folder.dir.empty()) save_cache(path, description, indices);
  }
  return std::make_unique<GPTDataset>(std::move(data), kSplitNames[split], std::move(indices),
                                      config.seq_length, doc_begin, doc_end);
}

}  // namespace

DatasetSplits build_indexed_gpt_datasets(const DataConfig& config) {
  std::vector<double> weights;
  std::vector<std::string> prefixes;
  parse_data_path(config.data_path, &weights, &prefixes);
  TRIPOD_CHECK_HINT(config.seq_length >= 1, "pass --seq-length N", "--seq-length must be positive");
  TRIPOD_CHECK_HINT(config.seed < (1ull << 32), "use a --seed below 2^32",
                    "--seed {} does not fit numpy's RandomState (as Megatron)", config.seed);

  std::vector<std::shared_ptr<const IndexedDataset>> files;
  std::vector<CacheFolder> folders;
  std::vector<std::vector<int64_t>> ranges;
  for (const auto& p : prefixes) {
    auto d = std::make_shared<const IndexedDataset>(p);
    folders.push_back(cache_folder(p, config));
    // Before --split: no split can help a dataset without tokens.
    TRIPOD_CHECK_HINT(d->num_tokens() > 0,
                      fmt::format("check the input of the `tripod preprocess` that wrote it (its summary counts "
                                  "documents and tokens) and re-run it{}",
                                  prefixes.size() > 1 ? ", or leave this prefix out of --data-path" : ""),
                      "the dataset {} has no {} ({}): there is nothing to train on", p,
                      d->num_documents() == 0 ? "documents" : "tokens",
                      d->num_documents() == 0 ? fmt::format("{} holds 0 documents", idx_path(p))
                                              : fmt::format("its {} documents are all empty", d->num_documents()));
    check_vocab(*d, folders.back(), config.padded_vocab_size);
    ranges.push_back(split_document_ranges(config.split, d->num_sequences()));
    files.push_back(std::move(d));
  }
  const int64_t targets[3] = {config.train_samples, config.valid_samples, config.test_samples};
  std::unique_ptr<TokenDataset>* outs[3];
  DatasetSplits result;
  outs[0] = &result.train;
  outs[1] = &result.valid;
  outs[2] = &result.test;

  // A weighted --data-path (even "1.0 A") is a blend, as in Megatron-Core:
  // its datasets are built with a 0.5% surplus, which changes their epochs.
  const bool blended = config.data_path.size() > 1;
  for (int s = 0; s < 3; ++s) {
    // Validation and test are only built when samples are asked of them;
    // train without a count covers one epoch.
    if (s > 0 && targets[s] <= 0) continue;
    if (!blended) {
      if (ranges[0][s + 1] > ranges[0][s])
        *outs[s] = build_split(files[0], folders[0], s, ranges[0][s], ranges[0][s + 1], config, targets[s]);
    } else {
      TRIPOD_CHECK_HINT(targets[s] > 0, "set --train-iters (or --train-samples)",
                        "a blended --data-path needs the number of {} samples", kSplitNames[s]);
      std::vector<double> w;
      std::vector<size_t> used;
      for (size_t f = 0; f < files.size(); ++f) {
        if (ranges[f][s + 1] <= ranges[f][s]) continue;  // this file has no documents here
        w.push_back(weights[f]);
        used.push_back(f);
      }
      // Megatron sizes the parts with the normalised weights and its
      // BlendedDataset normalises them once more for the interleaving.
      if (used.size() < files.size()) w = numpy_normalize(w);
      std::vector<double> blend_w = numpy_normalize(w);
      std::vector<std::unique_ptr<TokenDataset>> parts;
      int64_t size = 0;
      for (size_t k = 0; k < used.size(); ++k) {
        const size_t f = used[k];
        // Megatron's _get_size_per_split_per_dataset: the blend holds
        // ceil(N * w) samples of each dataset, which is built with 0.5% more.
        const double share = std::ceil(static_cast<double>(targets[s]) * w[k]);
        size += static_cast<int64_t>(share);
        const auto n = static_cast<int64_t>(std::ceil(share * 1.005));
        parts.push_back(build_split(files[f], folders[f], s, ranges[f][s], ranges[f][s + 1], config, n));
      }
      if (!parts.empty())
        *outs[s] = std::make_unique<BlendedDataset>(std::move(parts), std::move(blend_w), size);
    }
    TRIPOD_CHECK_HINT(s > 0 || *outs[s], "give the train split documents, e.g. --split 969,30,1",
                      "--split '{}' leaves no documents for training", config.split);
    if (*outs[s]) log::info("data: {}", (*outs[s])->describe());
  }
  return result;
}

}  // namespace tripod::data
