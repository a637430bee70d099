// In-process GPT-2 tokenizer throughput on one core: the pre-tokenizer alone,
// then full encoding (pre-tokenizer + cache + BPE), over a text file encoded
// line by line (the same work `tripod preprocess --input-format text` does,
// without I/O and threads). Used by bench/tokenizer/run.sh.
//   tokenizer_bench VOCAB MERGES FILE [REPEATS] [encode]   (encode: skip the pre-tokenizer pass)
//   tokenizer_bench --hf TOKENIZER_JSON FILE [REPEATS]      (HuggingFaceTokenizer, encode only)
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "data/gpt2_bpe.h"
#include "data/gpt2_pretokenizer.h"
#include "data/hf_tokenizer.h"

using namespace tripod::data;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s VOCAB MERGES FILE [REPEATS] [encode] | --hf TOKENIZER_JSON FILE [REPEATS]\n",
                 argv[0]);
    return 1;
  }
  const bool hf = std::string(argv[1]) == "--hf";
  const int repeats = argc > 4 ? std::atoi(argv[4]) : 3;
  const bool encode_only = hf || (argc > 5 && std::string(argv[5]) == "encode");
  std::unique_ptr<Tokenizer> tok;
  if (hf) tok = std::make_unique<HuggingFaceTokenizer>(argv[2]);
  else tok = std::make_unique<GPT2BPETokenizer>(argv[1], argv[2]);
  std::ifstream f(argv[3], std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string_view> lines;
  for (size_t i = 0; i < text.size();) {
    size_t j = text.find('\n', i);
    if (j == std::string::npos) j = text.size();
    if (j > i) lines.emplace_back(text.data() + i, j - i);
    i = j + 1;
  }
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  const double mb = static_cast<double>(text.size()) / 1e6;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = now();
    size_t pieces = 0;
    if (!encode_only)
      for (auto l : lines) pieces += gpt2_pretokenize(l).size();
    auto t1 = now();
    std::vector<int32_t> ids;
    size_t tokens = 0;
    for (auto l : lines) {
      ids.clear();
      tok->encode(l, &ids);
      tokens += ids.size();
    }
    auto t2 = now();
    std::printf("pretokenize %.1f MB/s (%zu pieces) | encode %.1f MB/s, %.2f M tokens/s (%zu tokens)\n",
                mb / secs(t0, t1), pieces, mb / secs(t1, t2), tokens / 1e6 / secs(t1, t2), tokens);
  }
  return 0;
}
