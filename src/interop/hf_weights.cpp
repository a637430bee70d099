// Implementation of interop/hf_weights.h.
#include "interop/hf_weights.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "base/error.h"
#include "ckpt/atomic_io.h"

namespace tripod::interop {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// TRIPOD_FAIL with the fix (base/error.h has the CHECK form only).
#define HF_FAIL_HINT(hint, ...) \
  ::tripod::detail::check_failed(nullptr, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__), (hint))

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

// save_pretrained's shard names: model-00001-of-00004.safetensors.
bool is_shard_name(const std::string& n) {
  static const std::regex shard(R"(model-\d+-of-\d+\.safetensors)");
  return std::regex_match(n, shard);
}

std::vector<std::string> folder_files(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A folder with PyTorch pickles only: the command that re-saves it as safetensors.
[[noreturn]] void refuse_bin(const fs::path& dir, const std::string& bin) {
  HF_FAIL_HINT(fmt::format("re-save it as safetensors with transformers: python3 -c \"from transformers import "
                               "AutoModelForCausalLM as M; M.from_pretrained('{}').save_pretrained('OUT')\" (safetensors "
                               "is save_pretrained's default), then --import-hf OUT",
                               dir.string()),
                   "{}: the weights are PyTorch pickles ({}); tripod reads safetensors only (no code runs on load)",
                   dir.string(), bin);
}

}  // namespace

uint64_t parse_shard_size(const std::string& text, const std::string& flag) {
  std::string upper;
  for (char ch : text) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  static const std::pair<const char*, uint64_t> kUnits[] = {{"GIB", 1ull << 30}, {"MIB", 1ull << 20},
                                                           {"KIB", 1ull << 10}, {"GB", 1'000'000'000ull},
                                                           {"MB", 1'000'000ull}, {"KB", 1'000ull}};
  uint64_t unit = 1;
  std::string digits = upper;
  for (const auto& [suffix, scale] : kUnits) {
    const std::string s = suffix;
    if (upper.size() > s.size() && upper.compare(upper.size() - s.size(), s.size(), s) == 0) {
      unit = scale;
      digits = upper.substr(0, upper.size() - s.size());
      break;
    }
  }
  TRIPOD_CHECK_HINT(!digits.empty() && digits.size() <= 12 &&
                        digits.find_first_not_of("0123456789") == std::string::npos,
                    "write a whole number of bytes or one with a unit, as transformers: 5GB, 500MB, 2GiB",
                    "{} '{}' is not a size", flag, text);
  const uint64_t n = std::stoull(digits);
  TRIPOD_CHECK_HINT(n > 0, "pass a positive size, e.g. 5GB", "{} '{}' is zero", flag, text);
  return n * unit;
}

HfWeights HfWeights::open(const std::string& in_dir) {
  HfWeights w;
  const fs::path dir(in_dir);
  const fs::path single = dir / kSingle, index = dir / kIndex;
  const std::vector<std::string> files = folder_files(dir);
  const bool has_single = fs::exists(single), has_index = fs::exists(index);
  if (!has_single && !has_index) {
    for (const auto& f : files)
      TRIPOD_CHECK_HINT(!is_shard_name(f), "copy model.safetensors.index.json (save_pretrained writes it beside the "
                        "shards) into the folder",
                        "{}: {} is a shard but {} is missing", in_dir, f, index.string());
    for (const auto& f : files)
      if (f == "pytorch_model.bin" || f == "pytorch_model.bin.index.json") refuse_bin(dir, f);
    HF_FAIL_HINT("point --import-hf at a folder written by save_pretrained", "{}: neither {} nor {} exists",
                     in_dir, kSingle, kIndex);
  }
  TRIPOD_CHECK_HINT(!(has_single && has_index),
                    "remove the stale one: save_pretrained writes one of them (the index when the model is above "
                    "max_shard_size)",
                    "{} holds both {} and {}: which weights are current is ambiguous", in_dir, kSingle, kIndex);
  if (has_single) {
    w.files_.push_back(ckpt::SafetensorsFile::open(single.string()));
    for (const auto& e : w.files_[0].entries()) w.file_of_[e.name] = 0;
    w.describe_ = single.string();
    return w;
  }
  // The index, then every shard's header against it.
  const std::string ip = index.string();
  json j = json::parse(ckpt::read_text(ip), nullptr, false);
  TRIPOD_CHECK(!j.is_discarded() && j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
               "{}: not a safetensors index (expected a JSON object with \"weight_map\": {{tensor: file}})", ip);
  std::map<std::string, std::string> placed;  // tensor -> shard file named by the index
  std::map<std::string, size_t> shard_index;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    TRIPOD_CHECK(it->is_string(), "{}: weight_map entry '{}' is not a file name", ip, it.key());
    const std::string f = it->get<std::string>();
    TRIPOD_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..",
                 "{}: weight_map places '{}' in '{}', not a file of the folder", ip, it.key(), f);
    placed[it.key()] = f;
    if (shard_index.count(f)) continue;
    const fs::path sp = dir / f;
    TRIPOD_CHECK_HINT(fs::exists(sp), "copy every shard the index names into the folder (an interrupted download?)",
                      "{} is missing: {} places tensor '{}' in it", sp.string(), ip, it.key());
    shard_index[f] = w.files_.size();
    w.files_.push_back(ckpt::SafetensorsFile::open(sp.string()));
  }
  TRIPOD_CHECK(!placed.empty(), "{}: the weight_map is empty", ip);
  for (const auto& f : files)
    TRIPOD_CHECK_HINT(!is_shard_name(f) || shard_index.count(f),
                      "remove it (a left-over of another save?) or restore the index that names it",
                      "{}/{} is a shard that {} does not name", in_dir, f, ip);
  for (size_t i = 0; i < w.files_.size(); ++i)
    for (const auto& e : w.files_[i].entries()) {
      auto [prev, fresh] = w.file_of_.emplace(e.name, i);
      TRIPOD_CHECK_HINT(fresh, "re-save the model (shards of two saves mixed?)",
                        "tensor '{}' is in two shards, {} and {}", e.name, w.files_[prev->second].path(),
                        w.files_[i].path());
    }
  for (const auto& [name, i] : w.file_of_) {
    auto p = placed.find(name);
    TRIPOD_CHECK_HINT(p != placed.end(), "re-save the model, or restore the index written with these shards",
                      "{} holds tensor '{}', which {} does not list", w.files_[i].path(), name, ip);
    TRIPOD_CHECK_HINT(shard_index.at(p->second) == i,
                      "re-save the model, or restore the index written with these shards",
                      "{} holds tensor '{}', which {} places in {}", w.files_[i].path(), name, ip, p->second);
  }
  for (const auto& [name, f] : placed)
    TRIPOD_CHECK_HINT(w.file_of_.count(name), "re-save the model, or restore the shards written with this index",
                      "{}/{} has no tensor '{}', which {} places in it", in_dir, f, name, ip);
  w.describe_ = fmt::format("{} ({} shards)", ip, w.files_.size());
  return w;
}

Tensor HfWeights::read_f32(const std::string& name) const {
  auto it = file_of_.find(name);
  TRIPOD_CHECK(it != file_of_.end(), "{}: no tensor named '{}'", describe_, name);
  return files_[it->second].read_f32(name);
}

std::string HfWeights::path_of(const std::string& name) const {
  auto it = file_of_.find(name);
  return it == file_of_.end() ? describe_ : files_[it->second].path();
}

size_t write_hf_weights(const std::string& out_dir, const std::vector<std::pair<std::string, Tensor>>& tensors,
                        uint64_t max_shard_size) {
  const std::map<std::string, std::string> meta{{"format", "pt"}};
  // Shards as [begin, end) ranges of `tensors`.
  std::vector<std::pair<size_t, size_t>> shards;
  uint64_t current = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t n = tensors[i].second.nbytes();
    total += n;
    if (shards.empty() || (current > 0 && current + n > max_shard_size)) {
      shards.push_back({i, i});
      current = 0;
    }
    shards.back().second = i + 1;
    current += n;
  }
  if (shards.size() <= 1) {
    ckpt::write_safetensors((fs::path(out_dir) / kSingle).string(), tensors, meta, /*with_checksums=*/false);
    return 1;
  }
  json weight_map = json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
    const std::vector<std::pair<std::string, Tensor>> part(tensors.begin() + static_cast<ptrdiff_t>(shards[s].first),
                                                           tensors.begin() + static_cast<ptrdiff_t>(shards[s].second));
    ckpt::write_safetensors((fs::path(out_dir) / file).string(), part, meta, /*with_checksums=*/false);
    for (const auto& [name, t] : part) weight_map[name] = file;
  }
  // As transformers: json.dumps(index, indent=2, sort_keys=True) + "\n".
  const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  ckpt::write_text_atomic((fs::path(out_dir) / kIndex).string(), index.dump(2) + "\n");
  return shards.size();
}

}  // namespace tripod::interop
