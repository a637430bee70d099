// Implementation of ckpt/sharded_checkpoint.h.
//
// NOTE [Atomic commit]
// A checkpoint becomes visible in one rename: every rank writes (and fsyncs)
// its file inside iter_XXXXXXX.tmp/, then rank 0 writes metadata.json into
// it (fsync), renames the directory to iter_XXXXXXX (fsync of the parent),
// and only then replaces latest_checkpointed_iteration.txt through a
// temporary file and a second rename. A crash before the first rename leaves
// a .tmp directory nobody reads; a crash between the two renames leaves a
// complete new checkpoint that the marker does not name yet. Either way the
// marker names a complete checkpoint. Old checkpoints are deleted only
// after the marker moved. Re-saving an iteration that already exists moves
// the old directory aside first (iter_X.old), then removes it. A crash
// between those two renames leaves iter_X.old and no iter_X while the marker
// may name X: the reader then reads iter_X.old (it is the complete earlier
// save of X), and the next save moves it back, or removes it when iter_X was
// committed after all (prepare_save; tests/faults/test_save_faults.cpp).
#include "ckpt/sharded_checkpoint.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <filesystem>
#include <optional>
#include <type_traits>

#include "base/error.h"
#include "base/log.h"
#include "base/temp_files.h"
#include "ckpt/atomic_io.h"
#include "ckpt/megatron_layout.h"

namespace tripod::ckpt {
namespace fs = std::filesystem;
using json = nlohmann::json;

static bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return c >= '0' && c <= '9'; });
}

std::string iter_dir_name(int64_t it) { return fmt::format("iter_{:07d}", it); }
std::string rank_file_name(int tp_rank, int pp_rank, int ep_rank) {
  if (ep_rank > 0) return fmt::format("model_rank_{}_{}_ep{}.safetensors", tp_rank, pp_rank, ep_rank);
  return fmt::format("model_rank_{}_{}.safetensors", tp_rank, pp_rank);
}

const char* shard_name(model::ShardDim s) {
  switch (s) {
    case model::ShardDim::None: return "None";
    case model::ShardDim::Rows: return "Rows";
    case model::ShardDim::Cols: return "Cols";
    case model::ShardDim::QkvRows: return "QkvRows";
    case model::ShardDim::GluRows: return "GluRows";
    case model::ShardDim::QkvGroups: return "QkvGroups";
  }
  return "?";
}

model::ShardDim shard_from_name(const std::string& s, const std::string& file) {
  for (auto d : {model::ShardDim::None, model::ShardDim::Rows, model::ShardDim::Cols, model::ShardDim::QkvRows,
                 model::ShardDim::GluRows, model::ShardDim::QkvGroups})
    if (s == shard_name(d)) return d;
  TRIPOD_FAIL("{}: unknown shard rule '{}'", file, s);
}

// Both directions walk config::visit_fields (config/gpt_config.h), the one
// list of the recorded fields. Enums are written with their Megatron
// spelling ("rope", "RMSNorm").
json config_to_json(const config::GptConfig& c) {
  json j = json::object();
  const bool options = !c.is_gpt2();  // GPT-2 checkpoints keep their metadata as before
  config::visit_fields(c, [&](const char* name, const auto& value, config::FieldKind kind) {
    if (kind == config::FieldKind::kOption && !options) return;
    if (kind == config::FieldKind::kMoe && !c.moe.enabled()) return;  // dense checkpoints keep their bytes
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, bool>)
      if (kind == config::FieldKind::kFlag && !value) return;  // so do checkpoints without the flag
    if constexpr (std::is_enum_v<std::decay_t<decltype(value)>>) j[name] = config::to_string(value);
    else j[name] = value;
  });
  return j;
}

namespace {

template <class T>
void read_field(const json& j, const char* name, T& value, config::FieldKind kind, const std::string& file) {
  if (kind != config::FieldKind::kCore && !j.contains(name)) return;  // older metadata: the default
  const json& v = kind == config::FieldKind::kCore ? j.at(name) : j[name];
  if constexpr (std::is_same_v<T, config::Position> || std::is_same_v<T, config::Norm>) {
    const std::string s = v.get<std::string>();
    std::optional<T> parsed;
    if constexpr (std::is_same_v<T, config::Position>) parsed = config::position_from_string(s);
    else parsed = config::norm_from_string(s);
    TRIPOD_CHECK(parsed.has_value(), "{}: unknown {} '{}'", file, name, s);
    value = *parsed;
  } else {
    value = v.get<T>();
  }
}

}  // namespace

config::GptConfig config_from_json(const json& j, const std::string& file) {
  config::GptConfig c;
  try {
    config::visit_fields(c, [&](const char* name, auto& value, config::FieldKind kind) {
      read_field(j, name, value, kind, file);
    });
  } catch (const json::exception& e) {
    TRIPOD_FAIL("{}: model arguments are incomplete or malformed: {}", file, e.what());
  }
  return c;
}

int64_t read_latest_iteration(const std::string& dir) {
  const std::string marker = (fs::path(dir) / kLatestFile).string();
  if (!fs::exists(marker)) return -1;
  std::string s = read_text(marker);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  if (s == "release") {  // Megatron-LM's marker of a released checkpoint
    const std::string m = describe_megatron_checkpoint(dir);
    TRIPOD_CHECK_HINT(false, megatron_checkpoint_hint(dir), "{}",
                      m.empty() ? fmt::format("{}: 'release' marks a Megatron-LM checkpoint", marker) : m);
  }
  TRIPOD_CHECK(s.size() <= 18 && all_digits(s),
               "{}: expected an iteration number, found '{}' (corrupt marker)", marker, s.substr(0, 40));
  return std::stoll(s);
}

bool load_dir_has_checkpoint(const std::string& dir, std::string* why) {
  auto say = [&](std::string w) {
    if (why) *why = std::move(w);
    return false;
  };
  std::error_code ec;
  if (!fs::exists(dir, ec)) return say("the directory does not exist yet");
  TRIPOD_CHECK_HINT(fs::is_directory(dir, ec), "pass a checkpoint directory to --load",
                    "--load {}: not a directory", dir);
  if (read_latest_iteration(dir) >= 0) return true;  // throws on a corrupt marker
  std::vector<std::string> committed;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool iter_dir = name.rfind("iter_", 0) == 0 && name.size() == iter_dir_name(0).size() &&
                          all_digits(name.substr(5));
    if (iter_dir && e.is_directory()) committed.push_back(name);
  }
  TRIPOD_CHECK_HINT(committed.empty(),
                    fmt::format("write the iteration to resume from into {}/{} (e.g. `echo N > ...`), "
                                "or move the directories away to start over",
                                dir, kLatestFile),
                    "--load {}: holds {} but no {} (a save was interrupted between its last two steps, "
                    "or the marker was removed)",
                    dir, committed.front(), kLatestFile);
  return say(fmt::format("it holds no {}", kLatestFile));
}

std::string tmp_dir_for(const std::string& save_dir, int64_t it) {
  return (fs::path(save_dir) / (iter_dir_name(it) + ".tmp")).string();
}

static bool is_tmp_dir_name(const std::string& n) {
  return n.size() == iter_dir_name(0).size() + 4 && n.rfind("iter_", 0) == 0 && n.substr(n.size() - 4) == ".tmp" &&
         all_digits(n.substr(5, n.size() - 9));
}

// "iter_0000100.old": the aside copy of a re-saved iteration (NOTE [Atomic commit]).
static bool is_old_dir_name(const std::string& n) {
  return n.size() == iter_dir_name(0).size() + 4 && n.rfind("iter_", 0) == 0 && n.substr(n.size() - 4) == ".old" &&
         all_digits(n.substr(5, n.size() - 9));
}

static uint64_t bytes_under(const fs::path& p) {
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return fs::file_size(p, ec);  // a marker's temporary
  uint64_t total = 0;
  for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec)) total += it->file_size(ec);
  return total;
}

// NOTE [Stale temporaries]: only rank 0 of one job saves into a folder, and
// every rank saves the same iteration, so when a save starts every
// iter_*.tmp/ there is the debris of a save that failed or was killed. The
// marker's temporary (write_text_atomic: <marker>.tmp.<pid>) is removed when
// its process is gone.
std::string prepare_save(const std::string& save_dir, int64_t it) {
  const std::string tmp = tmp_dir_for(save_dir, it);
  fs::create_directories(save_dir);
  std::vector<fs::path> stale, moved_aside;
  for (const auto& e : fs::directory_iterator(save_dir)) {
    const std::string n = e.path().filename().string();
    const std::string marker_tmp = std::string(kLatestFile) + ".tmp.";
    if (is_tmp_dir_name(n) && e.is_directory()) {
      stale.push_back(e.path());
    } else if (is_old_dir_name(n) && e.is_directory()) {
      moved_aside.push_back(e.path());
    } else if (n.rfind(marker_tmp, 0) == 0 && all_digits(n.substr(marker_tmp.size())) &&
               n.size() - marker_tmp.size() <= 9 && !pid_alive(std::stoll(n.substr(marker_tmp.size())))) {
      stale.push_back(e.path());
    }
  }
  std::sort(stale.begin(), stale.end());
  for (const auto& p : stale) {
    const uint64_t bytes = bytes_under(p);
    fault_point("remove stale " + p.string());
    fs::remove_all(p);
    log::info("removed {} ({} bytes), left by a checkpoint save that failed or was killed", p.string(), bytes);
  }
  // A re-save killed between its renames (NOTE [Atomic commit]): iter_X.old
  // is the earlier save of X; it goes back unless X was committed since.
  std::sort(moved_aside.begin(), moved_aside.end());
  for (const auto& p : moved_aside) {
    const fs::path final_dir = p.parent_path() / p.stem();
    if (fs::exists(final_dir)) {
      const uint64_t bytes = bytes_under(p);
      fault_point("remove stale " + p.string());
      fs::remove_all(p);
      log::info("removed {} ({} bytes), left by a re-save of {} that was killed after its commit", p.string(), bytes,
                final_dir.filename().string());
    } else {
      rename_path(p.string(), final_dir.string());
      log::info("moved {} back to {}: a re-save of that iteration was killed between its two renames", p.string(),
                final_dir.string());
    }
  }
  fault_point("mkdir " + tmp);
  fs::create_directories(tmp);
  return tmp;
}

void discard_save(const std::string& save_dir, int64_t it) {
  const fs::path tmp = tmp_dir_for(save_dir, it);
  const fs::path final_dir = fs::path(save_dir) / iter_dir_name(it);
  const fs::path old = final_dir.string() + ".old";
  std::error_code ec;
  if (fs::exists(tmp, ec)) {
    const uint64_t bytes = bytes_under(tmp);
    fs::remove_all(tmp, ec);
    if (ec)
      log::warn("could not remove {} after the failed save: {}; remove it by hand", tmp.string(), ec.message());
    else
      log::info("removed {} ({} bytes) of the failed save", tmp.string(), bytes);
  }
  if (fs::exists(old, ec) && !fs::exists(final_dir, ec)) {
    fs::rename(old, final_dir, ec);  // the checkpoint this save was replacing
    if (ec) log::warn("could not move {} back to {}: {}", old.string(), final_dir.string(), ec.message());
  }
}

static std::map<std::string, std::string> rank_file_metadata(int tp_rank, int tp_size, int pp_rank,
                                                             const json& index) {
  return {{"format", "tripod"},
          {"tp_rank", std::to_string(tp_rank)},
          {"tp_size", std::to_string(tp_size)},
          {"pp_rank", std::to_string(pp_rank)},
          {"tensors", index.dump()}};
}

void write_rank_file(const std::string& tmp_dir, int tp_rank, int tp_size, int pp_rank,
                     const std::vector<ShardTensor>& tensors, int ep_rank) {
  json index = json::object();
  std::vector<std::pair<std::string, Tensor>> items;
  for (const auto& t : tensors) {
    index[t.name] = {{"global_shape", t.global_shape}, {"shard", shard_name(t.shard)}};
    items.emplace_back(t.name, t.local);
  }
  write_safetensors((fs::path(tmp_dir) / rank_file_name(tp_rank, pp_rank, ep_rank)).string(), items,
                    rank_file_metadata(tp_rank, tp_size, pp_rank, index));
}

static std::vector<SafetensorsWriter::Entry> f32_entries(const std::vector<RankFileWriter::Declared>& declared) {
  std::vector<SafetensorsWriter::Entry> e;
  for (const auto& t : declared) e.push_back({t.name, DType::F32, t.local_shape});
  return e;
}

static json declared_index(const std::vector<RankFileWriter::Declared>& declared) {
  json index = json::object();
  for (const auto& t : declared) index[t.name] = {{"global_shape", t.global_shape}, {"shard", shard_name(t.shard)}};
  return index;
}

RankFileWriter::RankFileWriter(const std::string& tmp_dir, int tp_rank, int tp_size, int pp_rank,
                               const std::vector<Declared>& declared, int ep_rank)
    : file_((fs::path(tmp_dir) / rank_file_name(tp_rank, pp_rank, ep_rank)).string(), f32_entries(declared),
            rank_file_metadata(tp_rank, tp_size, pp_rank, declared_index(declared))) {}

// Index of the tensors in the rank files of `dir`: name -> info.
// Also records each file's size and header CRC in `files`.
static json index_rank_files(const std::string& dir, json& file_info) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  TRIPOD_CHECK(!files.empty(), "{}: no rank files were written", dir);
  json tensors = json::object();
  for (const auto& name : files) {
    const std::string path = (fs::path(dir) / name).string();
    auto f = SafetensorsFile::open(path);
    file_info[name] = {{"bytes", f.file_size()}, {"header_crc32", fmt::format("{:08x}", f.header_crc())}};
    const auto& m = f.metadata();
    TRIPOD_CHECK(m.count("tp_rank") && m.count("tp_size") && m.count("tensors"), "{}: not a tripod rank file", path);
    const int tp_rank = std::stoi(m.at("tp_rank")), tp_size = std::stoi(m.at("tp_size"));
    const json idx = json::parse(m.at("tensors"));
    for (auto it = idx.begin(); it != idx.end(); ++it) {
      json& t = tensors[it.key()];
      if (t.is_null()) {
        t = {{"global_shape", (*it)["global_shape"]}, {"shard", (*it)["shard"]}, {"dtype", "F32"},
             {"tp_size", tp_size}, {"files", json::array()}};
        for (int r = 0; r < tp_size; ++r) t["files"].push_back(nullptr);
      }
      // The tied word embedding is on the first and the last pp stage: keep the first copy.
      if (t["files"][static_cast<size_t>(tp_rank)].is_null()) t["files"][static_cast<size_t>(tp_rank)] = name;
    }
  }
  return tensors;
}

static std::string dump_with_checksum(json meta) {
  meta.erase("crc32");
  const std::string body = meta.dump();
  meta["crc32"] = fmt::format("{:08x}", crc32(body.data(), body.size()));
  return meta.dump(1) + "\n";
}

json read_metadata(const std::string& path) {
  TRIPOD_CHECK_HINT(fs::exists(path), "the checkpoint was not committed; load an earlier iteration",
                    "{} is missing", path);
  json j = json::parse(read_text(path), nullptr, false);
  TRIPOD_CHECK(!j.is_discarded() && j.is_object() && j.contains("crc32") && j["crc32"].is_string(),
               "{}: not valid checkpoint metadata (corrupt file)", path);
  const std::string stored = j["crc32"].get<std::string>();
  j.erase("crc32");
  const std::string body = j.dump();
  const std::string got = fmt::format("{:08x}", crc32(body.data(), body.size()));
  TRIPOD_CHECK(got == stored, "{}: checksum mismatch (stored {}, computed {}): the file is corrupt", path, stored, got);
  TRIPOD_CHECK(j.value("format_version", 0) == kFormatVersion, "{}: checkpoint format version {} (this tripod "
               "reads {})", path, j.value("format_version", 0), kFormatVersion);
  return j;
}

// --save-retain K keeps the last K checkpoints of this run: `ours` says which
// iterations are (NOTE [Whose checkpoints]); another run's are never removed.
static void remove_old_checkpoints(const std::string& save_dir, int64_t current, int retain,
                                   const std::function<bool(int64_t)>& ours) {
  std::vector<int64_t> iters;
  for (const auto& e : fs::directory_iterator(save_dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("iter_", 0) != 0) continue;
    if (n.size() > 4 && n.substr(n.size() - 4) == ".tmp" && n != iter_dir_name(current) + ".tmp") {
      fault_point("remove stale " + n);
      fs::remove_all(e.path());  // a save that died earlier
      continue;
    }
    const std::string digits = n.substr(5);
    if (digits.size() <= 18 && all_digits(digits) && (!ours || ours(std::stoll(digits)) || std::stoll(digits) == current))
      iters.push_back(std::stoll(digits));
  }
  if (retain <= 0) return;
  std::sort(iters.begin(), iters.end());
  const int64_t drop = static_cast<int64_t>(iters.size()) - retain;
  for (int64_t i = 0; i < drop; ++i) {
    const int64_t it = iters[static_cast<size_t>(i)];
    if (it == current) continue;
    const fs::path p = fs::path(save_dir) / iter_dir_name(it);
    fault_point("remove " + iter_dir_name(it));
    fs::remove_all(p);
    log::info("removed {} (--save-retain {}: the last {} checkpoint(s) of this run are kept)", p.string(), retain,
              retain);
  }
}

static void commit_save_impl(const std::string& save_dir, int64_t it, json meta, int retain,
                             const std::function<bool(int64_t)>& ours);

void commit_save(const std::string& save_dir, int64_t it, json meta, int retain,
                 const std::function<bool(int64_t)>& ours) {
  try {
    commit_save_impl(save_dir, it, std::move(meta), retain, ours);
  } catch (...) {
    discard_save(save_dir, it);
    throw;
  }
}

void save_unsharded(const std::string& save_dir, int64_t iteration, const std::vector<ShardTensor>& tensors,
                    json meta) {
  reset_fault_points();
  const std::string tmp = prepare_save(save_dir, iteration);
  try {
    write_rank_file(tmp, 0, 1, 0, tensors);
  } catch (...) {
    discard_save(save_dir, iteration);
    throw;
  }
  meta["layout"] = {{"tp", 1}, {"pp", 1}, {"dp", 1}};
  commit_save(save_dir, iteration, std::move(meta), 0);
}

static void commit_save_impl(const std::string& save_dir, int64_t it, json meta, int retain,
                             const std::function<bool(int64_t)>& ours) {
  const std::string tmp = tmp_dir_for(save_dir, it);
  const std::string final_dir = (fs::path(save_dir) / iter_dir_name(it)).string();
  meta["format_version"] = kFormatVersion;
  meta["iteration"] = it;
  json files = json::object();
  meta["tensors"] = index_rank_files(tmp, files);
  meta["files"] = files;
  write_text_synced((fs::path(tmp) / kMetadataFile).string(), dump_with_checksum(meta));
  fsync_dir(tmp);
  std::string old;
  if (fs::exists(final_dir)) {
    old = final_dir + ".old";
    fs::remove_all(old);
    rename_path(final_dir, old);
  }
  rename_path(tmp, final_dir);
  fsync_dir(save_dir);
  int64_t before = -1;
  try {
    before = read_latest_iteration(save_dir);
  } catch (const Error&) {  // a damaged marker is replaced
  }
  write_text_atomic((fs::path(save_dir) / kLatestFile).string(), std::to_string(it) + "\n");
  if (before > it)
    log::info("{} in {} went back from {} to {}: this run saves an earlier iteration than the folder's latest "
              "(--ckpt-step or --save-into-existing); --load {} now resumes from {}", kLatestFile, save_dir, before,
              it, save_dir, it);
  if (!old.empty()) {
    fault_point("remove " + old);
    fs::remove_all(old);
  }
  remove_old_checkpoints(save_dir, it, retain, ours);
}

// ---- reader ----

CheckpointReader CheckpointReader::open(const std::string& dir, int64_t iteration) {
  CheckpointReader r;
  if (iteration < 0) {
    TRIPOD_CHECK_HINT(fs::is_directory(dir), "pass an existing checkpoint directory to --load",
                      "--load {}: no such directory", dir);
    iteration = read_latest_iteration(dir);
    TRIPOD_CHECK_HINT(iteration >= 0, "train with --save DIR first, or drop --load",
                      "--load {}: no {} in it (not a checkpoint directory)", dir, kLatestFile);
  }
  r.iteration_ = iteration;
  r.path_ = (fs::path(dir) / iter_dir_name(iteration)).string();
  if (!fs::exists(r.path_) && fs::is_directory(r.path_ + ".old")) {
    // A re-save of this iteration was killed between its renames (NOTE [Atomic commit]).
    log::warn("{} is missing but {}.old holds the earlier save of iteration {} (a re-save was killed between its "
              "two renames): reading that; the next save moves it back", r.path_, r.path_, iteration);
    r.path_ += ".old";
  }
  // Megatron-LM uses the same marker and iter_N names: say what it is.
  if (const std::string m = describe_megatron_checkpoint(r.path_); !m.empty())
    TRIPOD_CHECK_HINT(false, megatron_checkpoint_hint(dir), "--load {}: not a tripod checkpoint; {}", dir, m);
  r.meta_ = read_metadata((fs::path(r.path_) / kMetadataFile).string());
  const std::string where = (fs::path(r.path_) / kMetadataFile).string();
  TRIPOD_CHECK(r.meta_.value("iteration", int64_t{-1}) == iteration, "{}: records iteration {}, expected {}", where,
               r.meta_.value("iteration", int64_t{-1}), iteration);
  TRIPOD_CHECK(r.meta_.contains("tensors") && r.meta_["tensors"].is_object(), "{}: no tensor index", where);
  try {
    for (auto itr = r.meta_["tensors"].begin(); itr != r.meta_["tensors"].end(); ++itr) {
      TensorInfo t;
      t.name = itr.key();
      t.global_shape = (*itr).at("global_shape").get<Shape>();
      int64_t numel = 1;  // (corrupt shapes must not overflow the shard arithmetic)
      for (int64_t d : t.global_shape)
        TRIPOD_CHECK(d >= 0 && !__builtin_mul_overflow(numel, d, &numel) && numel <= (int64_t{1} << 50),
                     "{}: tensor {} has an impossible global shape {} (corrupt file)", where, t.name,
                     shape_str(t.global_shape));
      t.shard = shard_from_name((*itr).at("shard").get<std::string>(), where);
      t.tp_size = (*itr).at("tp_size").get<int>();
      const auto& files = (*itr).at("files");
      TRIPOD_CHECK(t.tp_size >= 1 && files.is_array() && files.size() == static_cast<size_t>(t.tp_size),
                   "{}: tensor {} lists {} slices for tp size {}", where, t.name, files.size(), t.tp_size);
      for (const auto& f : files) {
        TRIPOD_CHECK(f.is_string(), "{}: tensor {} is missing a tp slice (a rank file was not written)", where,
                     t.name);
        const std::string fname = f.get<std::string>();
        TRIPOD_CHECK(fname.find('/') == std::string::npos && fname.find("..") == std::string::npos,
                     "{}: tensor {} names file '{}' outside the checkpoint", where, t.name, fname);
        t.slice_files.push_back(fname);
      }
      r.tensors_[t.name] = std::move(t);
    }
  } catch (const json::exception& e) {
    TRIPOD_FAIL("{}: malformed tensor index: {}", where, e.what());
  }
  return r;
}

void CheckpointReader::verify() const {
  std::vector<std::string> names;
  if (meta_.contains("files") && meta_["files"].is_object())
    for (auto it = meta_["files"].begin(); it != meta_["files"].end(); ++it) names.push_back(it.key());
  for (const auto& [n, t] : tensors_)
    for (const auto& f : t.slice_files) names.push_back(f);
  for (const auto& n : names) (void)file(n);
}

std::vector<int64_t> committed_iterations(const std::string& dir) {
  std::vector<int64_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("iter_", 0) == 0 && name.size() == iter_dir_name(0).size() && all_digits(name.substr(5)) &&
        e.is_directory())
      out.push_back(std::stoll(name.substr(5)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

int64_t newest_intact_iteration(const std::string& dir, int64_t before) {
  const auto iters = committed_iterations(dir);
  for (auto it = iters.rbegin(); it != iters.rend(); ++it) {
    if (*it >= before) continue;
    try {
      CheckpointReader::open(dir, *it).verify();
      return *it;
    } catch (const Error&) {
    }
  }
  return -1;
}

config::GptConfig CheckpointReader::config() const {
  const std::string where = (fs::path(path_) / kMetadataFile).string();
  TRIPOD_CHECK(meta_.contains("model"), "{}: no model arguments", where);
  return config_from_json(meta_["model"], where);
}

const TensorInfo& CheckpointReader::info(const std::string& name) const {
  auto it = tensors_.find(name);
  TRIPOD_CHECK(it != tensors_.end(), "{}: the checkpoint has no tensor {}", path_, name);
  return it->second;
}

std::vector<std::string> CheckpointReader::tensor_names() const {
  std::vector<std::string> out;
  for (const auto& [n, t] : tensors_) out.push_back(n);
  return out;
}

const SafetensorsFile& CheckpointReader::file(const std::string& name) const {
  auto it = files_.find(name);
  if (it != files_.end()) return *it->second;
  const std::string path = (fs::path(path_) / name).string();
  TRIPOD_CHECK(meta_.contains("files") && meta_["files"].contains(name), "{}: {} is not listed in {}", path_, name,
               kMetadataFile);
  const json& want = meta_["files"][name];
  TRIPOD_CHECK(fs::exists(path), "{} is missing (the checkpoint is incomplete)", path);
  const uint64_t bytes = fs::file_size(path);
  TRIPOD_CHECK(want.value("bytes", uint64_t{0}) == bytes, "{}: {} bytes, but {} records {} (truncated or "
               "corrupt)", path, bytes, kMetadataFile, want.value("bytes", uint64_t{0}));
  auto f = std::make_shared<SafetensorsFile>(SafetensorsFile::open(path));
  const std::string crc = fmt::format("{:08x}", f->header_crc());
  TRIPOD_CHECK(want.value("header_crc32", "") == crc, "{}: header checksum {} does not match {} in {} (corrupt "
               "file)", path, crc, want.value("header_crc32", ""), kMetadataFile);
  return *files_.emplace(name, std::move(f)).first->second;
}

Tensor CheckpointReader::read_full(const std::string& name) const {
  const TensorInfo& t = info(name);
  model::ParamSpec spec{name, t.global_shape, t.shard};
  const Shape local = model::local_shape(spec, t.tp_size);
  // Every slice is checked against the files before the full tensor is
  // allocated: a corrupt global shape in metadata.json is an error, not a
  // terabyte allocation.
  std::vector<const SafetensorsFile*> files;
  for (int r = 0; r < t.tp_size; ++r) {
    const SafetensorsFile& f = file(t.slice_files[static_cast<size_t>(r)]);
    const StEntry* e = f.find(name);
    TRIPOD_CHECK(e, "{}: has no tensor {} (metadata says it does)", f.path(), name);
    TRIPOD_CHECK(e->dtype == DType::F32 && e->shape == local, "{}: tensor {} is {} {}, expected F32 {} (tp slice {} "
                 "of {})", f.path(), name, st_dtype_name(e->dtype), shape_str(e->shape), shape_str(local), r,
                 t.tp_size);
    files.push_back(&f);
  }
  Tensor full = Tensor::zeros(t.global_shape, DType::F32);
  for (int r = 0; r < t.tp_size; ++r) model::place_shard(full, files[static_cast<size_t>(r)]->read(name), t.shard,
                                                         t.tp_size, r);
  return full;
}

}  // namespace tripod::ckpt
