// `tripod preprocess`: Megatron's tools/preprocess_data.py flags ->
// data::preprocess (data/preprocess.h). Flags and the summary only.
#include <CLI/CLI.hpp>
#include <malloc.h>

#include "base/log.h"
#include "base/temp_files.h"
#include "cli/command.h"
#include "data/preprocess.h"

namespace tripod::cli {
namespace {

int run_preprocess(int argc, char** argv) {
  CLI::App app{"Tokenize a corpus into Megatron .bin/.idx files: "
               "{output-prefix}_{key}_document.bin/.idx (see docs/data.md)",
               "tripod preprocess"};
  data::PreprocessConfig c;
  app.add_option("--input", c.input, "input file (JSON lines, or text with --input-format)")->required();
  app.add_option("--input-format", c.input_format,
                 "jsonl | text (a document per line) | text-paragraphs (documents separated by "
                 "blank lines)")
      ->capture_default_str();
  app.add_option("--json-keys", c.json_keys, "keys to tokenize; each gets its own .bin/.idx")
      ->capture_default_str();
  app.add_option("--output-prefix", c.output_prefix, "path prefix of the outputs")->required();
  app.add_option("--tokenizer-type", c.tokenizer.type, "GPT2BPETokenizer | SentencePieceTokenizer | HuggingFaceTokenizer, or Megatron's "
                 "GPTSentencePieceTokenizer and Llama2Tokenizer (= SentencePieceTokenizer)")
      ->required();
  app.add_option("--vocab-file", c.tokenizer.vocab_file, "GPT-2 vocab (encoder.json / gpt2-vocab.json)");
  app.add_option("--merge-file", c.tokenizer.merge_file, "GPT-2 merges (vocab.bpe / gpt2-merges.txt)");
  app.add_option("--tokenizer-model", c.tokenizer.tokenizer_model, "SentencePiece .model file, or a Hugging Face tokenizer.json");
  app.add_flag("--append-eod", c.append_eod, "end every document with the end-of-document token (HuggingFaceTokenizer: the eos_token "
             "of a tokenizer_config.json beside it, else <|end_of_text|>, <|endoftext|>, </s> or <eos>)");
  app.add_option("--workers", c.workers, "tokenizer threads (the output does not depend on it)")
      ->capture_default_str();
  app.add_flag("--skip-invalid", c.skip_invalid,
               "skip (and count) malformed JSON lines and lines missing a key instead of stopping");
  bool quiet = false;
  app.add_flag("--no-progress", quiet, "no progress bar or progress lines");
  CLI11_PARSE(app, argc, argv);
  c.progress = !quiet;

  // Memory (docs/data.md, "Streaming, bounded memory"): the batches are
  // ~1 MiB buffers allocated and freed by different threads. glibc's
  // adaptive mmap threshold soon serves such sizes from the per-thread heap
  // arenas, which keep the freed pages (measured: 222 MB peak RSS at 16
  // workers on KJV x100); a fixed 128 KiB threshold maps every batch buffer
  // and returns it on free (125 MB). Only this process is concerned.
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  // SIGTERM/SIGINT remove the .bin/.idx temporaries (NOTE [Temporaries] in base/temp_files.h).
  remove_temporaries_on_signal();
  const data::PreprocessStats s = data::preprocess(c);
  const double mb = static_cast<double>(s.input_bytes) / 1e6;
  log::info("preprocess: done in {:.2f} s: {} records, {} documents, {} tokens; {} empty documents (written as "
            "Megatron does); skipped {} blank, {} invalid; {} with ill-formed UTF-8 repaired",
            s.seconds, s.records, s.documents, s.tokens, s.empty_documents, s.skipped_blank, s.skipped_invalid,
            s.utf8_repaired);
  log::info("preprocess: {:.1f} MB at {:.1f} MB/s, {:.2f} M tokens/s with {} worker(s)", mb,
            mb / std::max(s.seconds, 1e-9), static_cast<double>(s.tokens) / 1e6 / std::max(s.seconds, 1e-9),
            c.workers);
  for (const auto& p : s.outputs) log::info("preprocess: wrote {}.bin/.idx (train with --data-path {})", p, p);
  return 0;
}

}  // namespace

TRIPOD_REGISTER_COMMAND(preprocess, "preprocess", "tokenize a corpus into Megatron .bin/.idx files",
                        run_preprocess);

}  // namespace tripod::cli
