// Fuzz target: `tripod preprocess` reading JSONL (and the text formats)
// (data/preprocess.h), with the tiny GPT-2 vocabulary. Input: the input file.
// The input's size picks the format and --skip-invalid, so one corpus covers
// all of them. A run that succeeds must leave datasets that open, with as
// many documents as it reported.
#include <filesystem>

#include "base/log.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tripod;
  const std::string dir = fuzz::scratch_dir();
  static const bool vocab_written = [&] {
    log::set_level(log::Level::Error);  // preprocess reports every run
    fuzz::write_file(dir + "/tiny-encoder.json", fuzz::tiny_gpt2_vocab());
    fuzz::write_file(dir + "/tiny-vocab.bpe", fuzz::tiny_gpt2_merges());
    return true;
  }();
  (void)vocab_written;
  fuzz::write_file(dir + "/in.jsonl", data, size);
  data::PreprocessConfig c;
  c.input = dir + "/in.jsonl";
  static const char* kFormats[] = {"jsonl", "jsonl", "text", "text-paragraphs"};
  c.input_format = kFormats[size % 4];
  if (c.input_format == "jsonl" && size % 3 == 0) c.json_keys = {"text", "title"};
  c.skip_invalid = (size / 4) % 2 == 1;
  c.append_eod = true;
  c.output_prefix = dir + "/out";
  c.tokenizer = {"GPT2BPETokenizer", dir + "/tiny-encoder.json", dir + "/tiny-vocab.bpe", ""};
  c.progress = false;
  c.batch_bytes = 64;  // many batches from a small input
  fuzz::run_input([&] {
    const data::PreprocessStats st = data::preprocess(c);
    int64_t docs = 0;
    for (const auto& out : st.outputs) docs += data::IndexedDataset(out).num_documents();
    if (docs != st.documents) __builtin_trap();  // the outputs disagree with the report
  });
  return 0;
}
