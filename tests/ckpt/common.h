// Helpers for the checkpoint CLI tests: run the tripod binary, read the
// metrics JSONL, temporary directories.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace ckpt_test {

namespace fs = std::filesystem;

inline std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

inline int sh(const std::string& cmd) {
  const int s = std::system(cmd.c_str());
  return WIFEXITED(s) ? WEXITSTATUS(s) : -1;
}

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A directory removed at the end of the test unless it failed.
struct Scratch {
  fs::path dir;
  explicit Scratch(const std::string& name)
      : dir(fs::temp_directory_path() / ("tripod_ckcli_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  fs::path operator/(const std::string& s) const { return dir / s; }
};

// "lm_loss" of every logged iteration, keyed by position in the file.
inline std::vector<std::pair<int64_t, double>> losses(const fs::path& jsonl) {
  std::vector<std::pair<int64_t, double>> out;
  std::ifstream in(jsonl);
  std::string line;
  auto num = [&](const std::string& k) {
    const auto p = line.find("\"" + k + "\":");
    return p == std::string::npos ? std::string() : line.substr(p + k.size() + 3);
  };
  while (std::getline(in, line)) {
    if (line.find("\"lm_loss\"") == std::string::npos) continue;
    out.emplace_back(std::stoll(num("iteration")), std::stod(num("lm_loss")));
  }
  return out;
}

}  // namespace ckpt_test
