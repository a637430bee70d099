// Writes a tiny Megatron indexed dataset (PREFIX.bin + PREFIX.idx, MMIDIDX
// version 1, uint16 tokens = dtype code 8, one sequence per document) for
// tests that train through the CLI on real files.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace tripod::testing {

inline void write_megatron_dataset(const std::string& prefix, const std::vector<std::vector<uint16_t>>& docs) {
  auto put = [](std::ofstream& f, auto v) { f.write(reinterpret_cast<const char*>(&v), sizeof v); };
  std::ofstream bin(prefix + ".bin", std::ios::binary), idx(prefix + ".idx", std::ios::binary);
  // magic, version 1, dtype code 8 (uint16), S, D, lengths, pointers, doc index
  idx.write("MMIDIDX\x00\x00", 9);
  put(idx, uint64_t{1});
  put(idx, uint8_t{8});
  put(idx, uint64_t(docs.size()));
  put(idx, uint64_t(docs.size() + 1));
  for (const auto& d : docs) put(idx, static_cast<int32_t>(d.size()));
  int64_t ptr = 0;
  for (const auto& d : docs) {
    put(idx, ptr);
    ptr += static_cast<int64_t>(d.size() * 2);
    bin.write(reinterpret_cast<const char*>(d.data()), static_cast<std::streamsize>(d.size() * 2));
  }
  for (size_t i = 0; i <= docs.size(); ++i) put(idx, static_cast<int64_t>(i));
}

}  // namespace tripod::testing
