// Implementation of interop/hf_export.h. See NOTE [Export folder].
#include "interop/hf_export.h"

#include <unistd.h>

#include <filesystem>

#include "base/error.h"
#include "base/log.h"
#include "base/temp_files.h"
#include "ckpt/atomic_io.h"
#include "interop/hf_gpt2.h"
#include "interop/hf_llama.h"

namespace tripod::interop {
namespace {

namespace fs = std::filesystem;

void write_model(const ckpt::CheckpointReader& reader, const std::string& dir, uint64_t max_shard_size) {
  const config::GptConfig c = reader.config();
  if (c.is_gpt2()) return export_hf_gpt2(reader, dir, max_shard_size);
  TRIPOD_CHECK_HINT(!c.qk_layernorm || c.rmsnorm(), "export GPT-2 models without --qk-layernorm",
                    "{}: --qk-layernorm with LayerNorm has no Hugging Face class here", reader.path());
  std::string why;
  TRIPOD_CHECK_HINT(is_hf_llama(c, &why), "export GPT-2 or Llama-family checkpoints",
                    "{} is neither GPT-2 nor a Llama-family model: {}", reader.path(), why);
  export_hf_llama(reader, dir, max_shard_size);
}

// Temporaries of earlier exports into `parent` whose process is gone.
void remove_dead_temporaries(const fs::path& parent, const std::string& name) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string n = e.path().filename().string();
    for (const std::string& tag : {"." + name + ".tmp-", "." + name + ".old-"}) {
      if (n.rfind(tag, 0) != 0) continue;
      const std::string pid = n.substr(tag.size());
      if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos ||
          pid_alive(std::stoll(pid)))
        continue;
      fs::remove_all(e.path(), ec);
      log::info("removed {}, left by an export that was killed", e.path().string());
    }
  }
}

}  // namespace

void export_hf(const ckpt::CheckpointReader& reader, const std::string& out_dir, bool replace,
               uint64_t max_shard_size) {
  std::error_code ec;
  const fs::path out = fs::path(out_dir).lexically_normal();
  const std::string name = out.filename().string();
  TRIPOD_CHECK_HINT(!name.empty() && name != "." && name != "..", "pass a folder name, e.g. --export-hf hf_model",
                    "--export-hf {}: not a folder name", out_dir);
  const bool exists = fs::exists(out, ec);
  if (exists) {
    TRIPOD_CHECK_HINT(fs::is_directory(out, ec), "pass a folder name (a new one, or --replace an existing folder)",
                      "--export-hf {} is a file, not a folder", out_dir);
    std::string held;
    int n = 0;
    for (const auto& e : fs::directory_iterator(out, ec))
      if (n++ < 5) held += (held.empty() ? "" : ", ") + e.path().filename().string();
    TRIPOD_CHECK_HINT(n == 0 || replace,
                      fmt::format("pass --replace to replace the folder (written beside it first: a failure leaves "
                                  "it whole), or another --export-hf folder"),
                      "--export-hf {} is not empty (it holds {}{}): exporting into it would mix another model's files "
                      "with this one's", out_dir, held, n > 5 ? fmt::format(" and {} more", n - 5) : "");
  }
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  ckpt::check_writable_dir("--export-hf", parent.string());
  remove_dead_temporaries(parent, name);
  const std::string pid = std::to_string(::getpid());
  const fs::path tmp = parent / ("." + name + ".tmp-" + pid), old = parent / ("." + name + ".old-" + pid);
  fs::remove_all(tmp, ec);
  try {
    fs::create_directories(tmp);
    write_model(reader, tmp.string(), max_shard_size);
    ckpt::fsync_dir(tmp.string());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  if (exists && fs::exists(out, ec)) {
    ckpt::rename_path(out.string(), old.string());
    try {
      ckpt::rename_path(tmp.string(), out.string());
    } catch (...) {
      fs::rename(old, out, ec);  // the old folder goes back
      fs::remove_all(tmp, ec);
      throw;
    }
    fs::remove_all(old, ec);
    log::info("replaced the contents of {} (--replace)", out_dir);
  } else {
    ckpt::rename_path(tmp.string(), out.string());
  }
  ckpt::fsync_dir(parent.string());
}

}  // namespace tripod::interop
