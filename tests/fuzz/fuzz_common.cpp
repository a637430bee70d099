// Implementation of fuzz_common.h.
#include "fuzz_common.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "data/gpt2_bpe.h"

namespace tripod::fuzz {

int64_t g_rejected = 0;

namespace {
std::string g_scratch;
void remove_scratch() {
  std::error_code ec;
  if (!g_scratch.empty()) std::filesystem::remove_all(g_scratch, ec);
}

void put_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// The GPT-2 spelling of raw bytes (bytes_to_unicode of each byte).
std::string spell(std::string_view raw) {
  std::string out;
  for (unsigned char c : raw) put_utf8(out, data::gpt2_byte_to_unicode(c));
  return out;
}

std::string json_escape(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += char(c);
  }
  return out;
}

constexpr const char* kMerges[][2] = {{" ", "t"}, {"h", "e"}, {" t", "he"}, {"i", "n"}, {" ", "a"},
                                      {"e", "r"}, {"o", "n"}, {" a", "n"}, {" an", "d"}, {"in", "g"}};
}  // namespace

void note_rejection(const tripod::Error& e) {
  static const bool verbose = std::getenv("TRIPOD_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "rejected: %s\n", e.what());
}

const std::string& scratch_dir() {
  if (g_scratch.empty()) {
    const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : nullptr;
    std::string t = (base ? std::string(base) : std::filesystem::temp_directory_path().string()) +
                    "/tripod-fuzz-XXXXXX";
    TRIPOD_CHECK(::mkdtemp(t.data()) != nullptr, "cannot create a scratch folder {}: {}", t, std::strerror(errno));
    g_scratch = t;
    std::atexit(remove_scratch);
  }
  return g_scratch;
}

void write_file(const std::string& path, const void* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  TRIPOD_CHECK(f, "cannot write {}: {}", path, std::strerror(errno));
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
}

std::pair<std::string_view, std::string_view> split2(const uint8_t* data, size_t size) {
  const char* p = reinterpret_cast<const char*>(data);
  if (size < 4) return {std::string_view(p, size), {}};
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t(data[i]) << (8 * i);
  const size_t a = std::min<size_t>(n, size - 4);
  return {std::string_view(p + 4, a), std::string_view(p + 4 + a, size - 4 - a)};
}

std::string join2(std::string_view a, std::string_view b) {
  std::string out;
  const uint32_t n = uint32_t(a.size());
  for (int i = 0; i < 4; ++i) out += char((n >> (8 * i)) & 0xff);
  out += a;
  out += b;
  return out;
}

std::string tiny_gpt2_vocab() {
  std::string out = "{";
  int id = 0;
  auto add = [&](const std::string& spelled) {
    out += (id ? ", \"" : "\"") + json_escape(spelled) + "\": " + std::to_string(id);
    ++id;
  };
  for (int b = 0; b < 256; ++b) add(spell(std::string(1, char(b))));
  for (const auto& m : kMerges) add(spell(std::string(m[0]) + m[1]));
  add("<|endoftext|>");
  return out + "}\n";
}

std::string tiny_gpt2_merges() {
  std::string out = "#version: 0.2\n";
  for (const auto& m : kMerges) out += spell(m[0]) + " " + spell(m[1]) + "\n";
  return out;
}

}  // namespace tripod::fuzz
