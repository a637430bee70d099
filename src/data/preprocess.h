// `tripod preprocess`: raw text (JSONL or plain text) -> tokens -> Megatron
// .bin/.idx pairs, one per JSON key: {output_prefix}_{key}_document.{bin,idx}
// (the names Megatron's tools/preprocess_data.py writes).
//
// NOTE [Preprocess pipeline]
// One reader thread cuts the input into batches of whole records (~1 MiB,
// numbered in file order); `workers` threads parse and tokenize batches; the
// calling thread writes the results strictly in batch order. At most
// 2 * workers + 2 batches are in flight, so memory is bounded by the batch
// size (plus 4 bytes per document for the index) whatever the input size, and
// the output bytes do not depend on the number of workers. The first error
// in file order (a malformed JSON line, a missing key) stops the run with
// file:line, unless skip_invalid counts and skips such records; the outputs
// are only renamed into place when everything was written.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace tripod::data {

struct PreprocessConfig {
  std::string input;
  // jsonl: one JSON object per line; text: one document per line;
  // text-paragraphs: documents separated by blank lines (newlines kept inside).
  std::string input_format = "jsonl";
  std::vector<std::string> json_keys = {"text"};
  std::string output_prefix;
  TokenizerConfig tokenizer;
  bool append_eod = false;
  int workers = 1;
  bool skip_invalid = false;
  // Progress: a bar on a terminal, otherwise a line every log_interval_s.
  bool progress = true;
  double log_interval_s = 10.0;
  int64_t batch_bytes = 1 << 20;  // reader batch size (tests use small batches)
};

struct PreprocessStats {
  int64_t records = 0;         // lines (or paragraphs) read
  int64_t documents = 0;       // documents written, summed over keys (empty ones included)
  int64_t empty_documents = 0; // documents with no tokens (written as Megatron does: no sequence)
  int64_t tokens = 0;          // tokens written, eod included
  int64_t skipped_invalid = 0; // malformed JSON / missing or non-string key (--skip-invalid)
  int64_t skipped_blank = 0;   // blank lines (no record)
  int64_t utf8_repaired = 0;   // records that held ill-formed UTF-8 (see data/utf8.h)
  int64_t input_bytes = 0;
  double seconds = 0;
  std::vector<std::string> outputs;  // the prefixes written (pass to --data-path)
};

PreprocessStats preprocess(const PreprocessConfig& config);

// "{prefix}_{key}_document"
std::string output_name(const std::string& output_prefix, const std::string& key);

}  // namespace tripod::data
