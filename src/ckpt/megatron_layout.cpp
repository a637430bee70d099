// Implementation of ckpt/megatron_layout.h.
#include "ckpt/megatron_layout.h"

#include <cctype>
#include <regex>

#include "base/error.h"
#include "ckpt/atomic_io.h"
#include "ckpt/sharded_checkpoint.h"

namespace tripod::ckpt {
namespace fs = std::filesystem;

namespace {

const std::regex kRankDir(R"(mp_rank_(\d\d)(?:_(\d\d\d))?(?:_(\d\d\d))?)");

}  // namespace

fs::path megatron_iteration_dir(const fs::path& dir, std::string* marker) {
  const std::string base = dir.filename().string();
  static const std::regex iter(R"(iter_\d{7,})");
  if (std::regex_match(base, iter) || base == "release") return dir;
  std::error_code ec;
  const fs::path latest = dir / kLatestFile;
  if (!fs::is_regular_file(latest, ec)) return {};
  std::string s = read_text(latest.string());
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  if (marker) *marker = s;
  if (s == "release") return dir / "release";
  if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) return {};
  return dir / iter_dir_name(std::stoll(s));
}

MegatronRankDirs megatron_rank_dirs(const fs::path& iter) {
  MegatronRankDirs r;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(iter, ec)) {
    std::smatch m;
    const std::string n = e.path().filename().string();
    if (!e.is_directory() || !std::regex_match(n, m, kRankDir)) continue;
    const int t = std::stoi(m[1]), p = m[2].matched ? std::stoi(m[2]) : 0;
    r.expert |= m[3].matched;
    r.tp = std::max(r.tp, t + 1);
    r.pp = std::max(r.pp, p + 1);
    r.files[{t, p}] = e.path() / "model_optim_rng.pt";
  }
  return r;
}

bool is_megatron_torch_dist(const fs::path& iter) {
  std::error_code ec;
  if (fs::exists(iter / ".metadata", ec)) return true;
  for (const auto& e : fs::directory_iterator(iter, ec))
    if (e.path().extension() == ".distcp") return true;
  return false;
}

std::string describe_megatron_checkpoint(const std::string& dir_in) {
  std::error_code ec;
  if (!fs::is_directory(dir_in, ec)) return "";
  std::string marker;
  const fs::path iter = megatron_iteration_dir(dir_in, &marker);
  if (marker == "release" && iter.empty()) return "";
  if (iter.empty() || !fs::is_directory(iter, ec)) {
    if (marker == "release") return fmt::format("{} holds a Megatron-LM release checkpoint marker", dir_in);
    return "";
  }
  const MegatronRankDirs r = megatron_rank_dirs(iter);
  if (!r.files.empty())
    return fmt::format("{} is a Megatron-LM checkpoint in the legacy torch format ({}: {} model-parallel file(s), "
                       "TP {} x PP {}{}, PyTorch pickles)",
                       dir_in, iter.filename().string(), r.files.size(), r.tp, r.pp, r.expert ? " with experts" : "");
  if (is_megatron_torch_dist(iter))
    return fmt::format("{} is a Megatron-LM checkpoint in the torch_dist format ({}: a PyTorch distributed "
                       "checkpoint, .metadata and *.distcp files)",
                       dir_in, iter.filename().string());
  return "";
}

std::string megatron_checkpoint_hint(const std::string& dir) {
  std::string marker;
  const fs::path iter = megatron_iteration_dir(dir, &marker);
  if (!iter.empty() && is_megatron_torch_dist(iter))
    return fmt::format(
        "convert it to the legacy format with Megatron-LM itself (its training script with --load {} "
        "--ckpt-convert-format torch --ckpt-convert-save NEW_DIR), then `tripod convert --import-megatron "
        "NEW_DIR --save CKPT` and train with --load CKPT",
        dir);
  return fmt::format("convert it: `tripod convert --import-megatron {} --save CKPT`, then train with --load CKPT "
                     "(--finetune to restart at iteration 0, --no-load-optim to continue its schedule)",
                     dir);
}

}  // namespace tripod::ckpt
