// Fuzz target: the GPT-2 vocab/merges loader (data/gpt2_bpe.h). Input:
// join2(encoder.json, vocab.bpe). An accepted pair must then encode text
// (a fixed sample, and the merges bytes as text) and decode it back to the
// same bytes (GPT-2's BPE is lossless on valid UTF-8).
#include <vector>

#include "data/gpt2_bpe.h"
#include "data/utf8.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tripod;
  const auto parts = fuzz::split2(data, size);
  const std::string_view vocab = parts.first, merges = parts.second;
  const std::string dir = fuzz::scratch_dir();
  fuzz::write_file(dir + "/encoder.json", vocab);
  fuzz::write_file(dir + "/vocab.bpe", merges);
  fuzz::run_input([&] {
    const data::GPT2BPETokenizer tok(dir + "/encoder.json", dir + "/vocab.bpe");
    const std::string sample =
        "the then and in an ing, they're 42 \xc3\xa9t\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd   \n\n" +
        std::string(100, 'a') + " " + std::string(merges.substr(0, 512));
    const std::string text = data::repair_utf8(sample);
    std::vector<int32_t> ids;
    tok.encode(text, &ids);
    for (int32_t id : ids)
      TRIPOD_CHECK(id >= 0 && id < tok.vocab_size(), "fuzz: id {} outside the vocab ({})", id, tok.vocab_size());
    const std::string back = tok.decode(ids);
    if (back != text) __builtin_trap();  // not an input error: the tokenizer lost bytes
  });
  return 0;
}
