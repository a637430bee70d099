// Fuzz target: the Hugging Face tokenizer.json loader (data/hf_tokenizer.h),
// then encode and decode. Input: the tokenizer.json text. An accepted file
// must give ids inside its vocabulary for any text, and decode them.
#include <vector>

#include "data/hf_tokenizer.h"
#include "data/utf8.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tripod;
  const std::string path = fuzz::scratch_dir() + "/tokenizer.json";
  fuzz::write_file(path, data, size);
  fuzz::run_input([&] {
    const data::HuggingFaceTokenizer tok(path);
    (void)tok.eod();
    const std::string text = data::repair_utf8(
        "<|begin_of_text|>the then and in an ing, they're 42 1234 \xc3\xa9t\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd  \n\n"
        "<|endoftext|><|im_start|> <mask>x " + std::string(80, 'a') + " e\xcc\x81");
    std::vector<int32_t> ids;
    tok.encode(text, &ids);
    for (int32_t id : ids)
      if (id < 0 || id >= tok.vocab_size()) __builtin_trap();  // an id outside the vocabulary
    (void)tok.decode(ids);
  });
  return 0;
}
