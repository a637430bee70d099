// Shared by the fuzz targets of tests/fuzz/ (docs/testing.md, "Fuzzing").
//
// Each fuzz_<target>.cpp defines LLVMFuzzerTestOneInput. Built with
// -DTRIPOD_FUZZ=ON (clang), it links libFuzzer's main; built by any compiler,
// it links replay_main.cpp, which writes the target's seeds (seeds.cpp, from
// the real writers) and replays them and tests/fuzz/regressions/<target>/.
//
// The readers under test take file names, so an input is written to a file
// in a per-process scratch folder first (on /dev/shm when there is one).
// Rejecting an input with tripod::Error is the expected outcome; any other
// exception escapes and is reported as a crash (an uncaught exception is not
// "a clear error naming the file"), as are sanitizer reports and aborts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "base/error.h"

namespace tripod::fuzz {

// The scratch folder of this process (created on first use, removed at exit).
const std::string& scratch_dir();
void write_file(const std::string& path, const void* data, size_t size);
inline void write_file(const std::string& path, std::string_view s) { write_file(path, s.data(), s.size()); }

// Two files in one input: u32 little-endian length of the first, its bytes,
// then the second. A short input is all first file.
std::pair<std::string_view, std::string_view> split2(const uint8_t* data, size_t size);
std::string join2(std::string_view a, std::string_view b);

// Inputs rejected with tripod::Error so far (the replay reports it).
extern int64_t g_rejected;

// Prints a rejection's message when TRIPOD_FUZZ_VERBOSE is set.
void note_rejection(const tripod::Error& e);

// Runs fn; a tripod::Error counts as a rejection, anything else propagates.
template <typename F>
void run_input(F&& fn) {
  try {
    fn();
  } catch (const tripod::Error& e) {
    ++g_rejected;
    note_rejection(e);
  }
}

// Seeds of one target into dir (seeds.cpp). `source_dir` is the repository
// (for the fixtures of tests/ckpt/fixtures). Names that start with "valid-"
// are real files that the reader must accept.
void write_seeds(const std::string& target, const std::string& dir, const std::string& source_dir);

// The small GPT-2 vocabulary of the tokenizer targets: the 256 byte tokens,
// a few merges and <|endoftext|> (encoder.json, vocab.bpe contents).
std::string tiny_gpt2_vocab();
std::string tiny_gpt2_merges();

}  // namespace tripod::fuzz
