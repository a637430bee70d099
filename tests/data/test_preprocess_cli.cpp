// `tripod preprocess` through the real executable ($TRIPOD_BIN): the .bin/.idx
// bytes against a layout built by hand from known GPT-2 ids ("Hello world" is
// 15496 995 in GPT-2's vocab, " Hello" 18435, <|endoftext|> 50256), identical
// bytes for any --workers on KJV, file:line errors that leave no outputs,
// --skip-invalid counting, UTF-8 repair, several --json-keys.
// Skips (with the reason) when the GPT-2 files cannot be fetched.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "testing/run_tripod.h"
#include "unit/data/test_util.h"

namespace tripod::data {
namespace {

using testing::read_bytes;
using testing::TempDir;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

struct Gpt2Files {
  std::string vocab, merges, why;
};

const Gpt2Files& gpt2_files() {
  static Gpt2Files f = [] {
    Gpt2Files r;
    TempDir t;
    const int rc = std::system(
        fmt::format("{}/scripts/get_gpt2_vocab.sh > {} 2>&1", env("TRIPOD_SOURCE_DIR"), t / "out").c_str());
    const std::string s = read_bytes(t / "out");
    const auto v = s.find("VOCAB="), m = s.find("MERGES=");
    if (rc != 0 || v == std::string::npos || m == std::string::npos) {
      r.why = "GPT-2 files unavailable (scripts/get_gpt2_vocab.sh needs npm): " + s;
      return r;
    }
    r.vocab = s.substr(v + 6, s.find('\n', v) - v - 6);
    r.merges = s.substr(m + 7, s.find('\n', m) - m - 7);
    return r;
  }();
  return f;
}

// Runs tripod preprocess with the GPT-2 tokenizer; returns the exit code,
// stdout+stderr in *log.
int preprocess(const std::string& args, std::string* log) {
  TempDir t;
  const auto& g = gpt2_files();
  const std::string cmd = fmt::format(
      "{} preprocess --tokenizer-type GPT2BPETokenizer --vocab-file {} --merge-file {} {} > {} 2>&1",
      env("TRIPOD_BIN"), g.vocab, g.merges, args, t / "log");
  const int rc = std::system(cmd.c_str());
  *log = read_bytes(t / "log");
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

template <typename T>
void put(std::string* s, T v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// The .idx Megatron's IndexedDatasetBuilder writes for documents of these
// lengths, one sequence each; a length of 0 is an empty document (no
// sequence, the document index repeats: add_document([], [])).
std::string hand_idx(const std::vector<int32_t>& doc_lengths) {
  std::vector<int32_t> lengths;
  std::vector<int64_t> doc_index{0};
  for (int32_t l : doc_lengths) {
    if (l > 0) lengths.push_back(l);
    doc_index.push_back(static_cast<int64_t>(lengths.size()));
  }
  std::string s("MMIDIDX\0\0", 9);
  put<uint64_t>(&s, 1);
  put<uint8_t>(&s, 8);  // uint16: GPT-2's 50257 < 65500
  put<uint64_t>(&s, lengths.size());
  put<uint64_t>(&s, doc_index.size());
  for (int32_t l : lengths) put<int32_t>(&s, l);
  int64_t p = 0;
  for (int32_t l : lengths) {
    put<int64_t>(&s, p);
    p += 2 * l;
  }
  for (int64_t d : doc_index) put<int64_t>(&s, d);
  return s;
}

class PreprocessCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (env("TRIPOD_BIN").empty()) GTEST_SKIP() << "TRIPOD_BIN is not set (run through ctest)";
    if (gpt2_files().vocab.empty()) GTEST_SKIP() << gpt2_files().why;
  }
  TempDir dir_;
};

TEST_F(PreprocessCli, BytesMatchHandBuiltLayout) {
  // An empty text is an empty document (no sequence, no eod; the document
  // index repeats), as Megatron's preprocess_data.py writes it; a blank line
  // is no record (Megatron's json.loads stops on it).
  std::ofstream(dir_ / "in.jsonl") << R"({"text": "Hello world", "id": 1})" "\n"
                                   << R"({"text": ""})" "\n"
                                   << "\n"
                                   << R"({"id": 3, "text": " Hello world"})" "\n";
  std::string log;
  ASSERT_EQ(preprocess(fmt::format("--input {} --output-prefix {} --append-eod --workers 2",
                                   dir_ / "in.jsonl", dir_ / "out"), &log), 0) << log;
  std::string bin;
  for (uint16_t t : {15496, 995, 50256, 18435, 995, 50256}) put<uint16_t>(&bin, t);
  EXPECT_EQ(read_bytes(dir_ / "out_text_document.bin"), bin);
  EXPECT_EQ(read_bytes(dir_ / "out_text_document.idx"), hand_idx({3, 0, 3}));
  EXPECT_NE(log.find("3 documents, 6 tokens; 1 empty documents (written as Megatron does); skipped 1 blank, 0 invalid"), std::string::npos) << log;
  EXPECT_NE(log.find("--data-path " + dir_ / "out_text_document"), std::string::npos) << log;
}

TEST_F(PreprocessCli, WorkerCountDoesNotChangeTheBytes) {
  if (std::system("command -v bible >/dev/null") != 0) GTEST_SKIP() << "bible (bible-kjv) missing";
  ASSERT_EQ(std::system(fmt::format("bible -l100000 gen1:1-rev22:21 > {}", dir_ / "kjv.txt").c_str()), 0);
  // KJV as JSON lines too (chapters as documents), to cover both readers.
  std::string log;
  for (int w : {1, 2, 5}) {
    ASSERT_EQ(preprocess(fmt::format("--input {} --input-format text --output-prefix {} --append-eod "
                                     "--workers {}", dir_ / "kjv.txt", dir_ / fmt::format("w{}", w), w),
                         &log), 0) << log;
  }
  const std::string bin1 = read_bytes(dir_ / "w1_text_document.bin");
  EXPECT_GT(bin1.size(), 2000000u);  // ~1.09 M tokens
  for (int w : {2, 5}) {
    EXPECT_EQ(read_bytes(dir_ / fmt::format("w{}_text_document.bin", w)), bin1) << w;
    EXPECT_EQ(read_bytes(dir_ / fmt::format("w{}_text_document.idx", w)),
              read_bytes(dir_ / "w1_text_document.idx")) << w;
  }
  EXPECT_NE(log.find("skipped 2378 blank"), std::string::npos) << log;
}

TEST_F(PreprocessCli, MalformedLineStopsWithFileLineAndLeavesNothing) {
  const std::string in = dir_ / "bad.jsonl";
  std::ofstream(in) << R"({"text": "fine"})" "\n" << R"({"text": "broken)" "\n"
                    << R"({"body": "no text key"})" "\n";
  std::string log;
  EXPECT_NE(preprocess(fmt::format("--input {} --output-prefix {}", in, dir_ / "out"), &log), 0);
  EXPECT_NE(log.find(in + ":2: malformed JSON"), std::string::npos) << log;
  EXPECT_NE(log.find("--skip-invalid"), std::string::npos) << log;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out_text_document.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out_text_document.idx"));
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir_.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1) << "temporary outputs left behind";

  ASSERT_EQ(preprocess(fmt::format("--input {} --output-prefix {} --skip-invalid", in, dir_ / "out"),
                       &log), 0) << log;
  EXPECT_NE(log.find("1 documents, 1 tokens; 0 empty documents (written as Megatron does); skipped 0 blank, 2 invalid"), std::string::npos) << log;

  std::ofstream(in) << R"({"text": "fine"})" "\n" << R"({"body": "x", "n": {"text": "nested"}})" "\n";
  EXPECT_NE(preprocess(fmt::format("--input {} --output-prefix {}", in, dir_ / "o2"), &log), 0);
  EXPECT_NE(log.find(in + ":2: missing key 'text'"), std::string::npos) << log;
  std::ofstream(in) << R"({"text": ["a"]})" "\n";
  EXPECT_NE(preprocess(fmt::format("--input {} --output-prefix {}", in, dir_ / "o3"), &log), 0);
  EXPECT_NE(log.find(in + ":1: key 'text' is not a string"), std::string::npos) << log;
  std::ofstream(in) << R"(["text", "x"])" "\n";
  EXPECT_NE(preprocess(fmt::format("--input {} --output-prefix {}", in, dir_ / "o4"), &log), 0);
  EXPECT_NE(log.find(in + ":1: the line is not a JSON object"), std::string::npos) << log;
  // A repeated key: the last value counts (as nlohmann-json's and Python's parsers do).
  std::ofstream(in) << R"({"text": 1, "x": {"text": 2}, "text": "Hello world"})" "\n";
  ASSERT_EQ(preprocess(fmt::format("--input {} --output-prefix {}", in, dir_ / "o5"), &log), 0) << log;
  std::string bin;
  for (uint16_t t : {15496, 995}) put<uint16_t>(&bin, t);
  EXPECT_EQ(read_bytes(dir_ / "o5_text_document.bin"), bin);
}

// A plain-text file passed without --input-format: the hint names the flag,
// and a run that keeps no document warns instead of passing quietly.
TEST_F(PreprocessCli, PlainTextWithoutInputFormatNamesTheFlag) {
  const std::string in = dir_ / "plain.txt";
  std::ofstream(in) << "In the beginning was the word.\nAnd the word was good.\n";
  std::string log;
  EXPECT_NE(preprocess(fmt::format("--input {} --output-prefix {}", in, dir_ / "p"), &log), 0);
  EXPECT_NE(log.find("pass --input-format text"), std::string::npos) << log;
  ASSERT_EQ(preprocess(fmt::format("--input {} --output-prefix {} --skip-invalid", in, dir_ / "p"), &log), 0)
      << log;
  EXPECT_NE(log.find("--input " + in + " holds no documents (2 records read; 0 blank and 2 invalid lines "
                     "skipped): " + dir_ / "p_text_document" + " is an empty dataset"),
            std::string::npos) << log;
}

// An empty input file: preprocess writes what Megatron writes for it (no
// sequences, document indices [0]) and exits 0 with a warning naming the
// file; training on it says the dataset has nothing in it, naming it, and
// does not blame --split. The same for a file of empty texts only (its
// documents repeat the index: [0, 0, 0]).
TEST_F(PreprocessCli, EmptyInputIsNamedByPreprocessAndByTraining) {
  std::ofstream(dir_ / "empty.jsonl");
  std::ofstream(dir_ / "blank.jsonl") << R"({"text": ""})" "\n" << R"({"text": ""})" "\n";
  std::string log;
  ASSERT_EQ(preprocess(fmt::format("--input {} --output-prefix {}", dir_ / "empty.jsonl", dir_ / "e"), &log), 0)
      << log;
  EXPECT_NE(log.find("warning: preprocess: --input " + dir_ / "empty.jsonl" + " holds no documents (0 records"),
            std::string::npos) << log;
  EXPECT_EQ(read_bytes(dir_ / "e_text_document.idx"), hand_idx({}));
  EXPECT_EQ(read_bytes(dir_ / "e_text_document.bin"), "");
  ASSERT_EQ(preprocess(fmt::format("--input {} --output-prefix {} --append-eod", dir_ / "blank.jsonl", dir_ / "b"),
                       &log), 0) << log;
  EXPECT_NE(log.find("holds only empty documents (2, no tokens)"), std::string::npos) << log;
  EXPECT_EQ(read_bytes(dir_ / "b_text_document.idx"), hand_idx({0, 0}));

  const auto& g = gpt2_files();
  const std::string train = fmt::format(
      "train --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 --micro-batch-size 1 "
      "--train-iters 1 --lr 1e-3 --vocab-file {} --merge-file {} --data-path ", g.vocab, g.merges);
  auto r = ::tripod::testing::run_tripod(train + dir_ / "e_text_document");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("the dataset " + dir_ / "e_text_document" + " has no documents (" +
                          dir_ / "e_text_document.idx" + " holds 0 documents)"),
            std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("--split"), std::string::npos) << r.output;
  r = ::tripod::testing::run_tripod(train + dir_ / "b_text_document");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("the dataset " + dir_ / "b_text_document" + " has no tokens (its 2 documents are all "
                          "empty)"),
            std::string::npos) << r.output;
}

// An .idx whose lengths disagree with its offsets (offset[i+1] must be
// offset[i] + length[i] * 2 for uint16) stops training before the first
// step, naming the file and the document, instead of silently shortening
// the document.
TEST_F(PreprocessCli, IdxLengthsThatDisagreeWithOffsetsAreRefused) {
  const std::string prefix = dir_ / "d";
  testing::write_docs(prefix, {{1, 2, 3}, {4, 5}, {6, 7, 8, 9}, {10}});  // offsets 0, 6, 10, 18
  std::string idx = read_bytes(prefix + ".idx");
  const int32_t shrunk = 1;  // document 1: 2 tokens -> 1
  std::memcpy(idx.data() + 34 + 4 * 1, &shrunk, 4);
  std::ofstream(prefix + ".idx", std::ios::binary) << idx;
  const auto& g = gpt2_files();
  const std::string train = fmt::format(
      "train --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 4 --micro-batch-size 1 "
      "--train-iters 1 --lr 1e-3 --vocab-file {} --merge-file {} --data-path {}", g.vocab, g.merges, prefix);
  auto r = ::tripod::testing::run_tripod(train);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(prefix + ".idx: the lengths do not match the offsets at document 1 (sequence 1): its 1 "
                          "tokens of 2 bytes from byte 6 end at byte 8, but the next sequence starts at byte 10"),
            std::string::npos) << r.output;
  // The last document's length: the .bin ends elsewhere.
  testing::write_docs(prefix, {{1, 2, 3}, {4, 5}});
  idx = read_bytes(prefix + ".idx");
  std::memcpy(idx.data() + 34 + 4 * 1, &shrunk, 4);
  std::ofstream(prefix + ".idx", std::ios::binary) << idx;
  r = ::tripod::testing::run_tripod(train);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("ending at byte 8 (the last, document 1, has 1 tokens from byte 6)"), std::string::npos)
      << r.output;
}

// A folder as --input: the error says why (fopen opens a folder; its read failed with no reason).
TEST_F(PreprocessCli, InputFolderSaysWhy) {
  std::string log;
  EXPECT_EQ(preprocess(fmt::format("--input {} --output-prefix {}", dir_.path(), dir_ / "d"), &log), 2) << log;
  EXPECT_NE(log.find("--input " + dir_.path() + " is a folder: tripod preprocess reads one file"),
            std::string::npos) << log;
  EXPECT_NE(log.find("--data-path W1 PREFIX1 W2 PREFIX2"), std::string::npos) << log;
  EXPECT_NE(preprocess(fmt::format("--input {} --output-prefix {}", dir_ / "missing.jsonl", dir_ / "d"), &log), 0);
  EXPECT_NE(log.find("cannot open --input " + dir_ / "missing.jsonl" + ": No such file or directory"),
            std::string::npos) << log;
}

TEST_F(PreprocessCli, IllFormedUtf8IsRepairedAndCounted) {
  std::ofstream(dir_ / "u.txt") << "Hello\xff world\n" << "Hello world\n";
  std::string log;
  ASSERT_EQ(preprocess(fmt::format("--input {} --input-format text --output-prefix {}",
                                   dir_ / "u.txt", dir_ / "u"), &log), 0) << log;
  EXPECT_NE(log.find("1 with ill-formed UTF-8 repaired"), std::string::npos) << log;
  // "Hello\uFFFD world" is Hello (15496), U+FFFD (4210), world (995) in GPT-2.
  std::string bin;
  for (uint16_t t : {15496, 4210, 995, 15496, 995}) put<uint16_t>(&bin, t);
  EXPECT_EQ(read_bytes(dir_ / "u_text_document.bin"), bin);
}

TEST_F(PreprocessCli, TextParagraphsAreSeparatedByBlankLines) {
  std::ofstream(dir_ / "p.txt") << "a\nb\n\n \t\n\nc\r\n";
  std::string log;
  ASSERT_EQ(preprocess(fmt::format("--input {} --input-format text-paragraphs --output-prefix {} "
                                   "--append-eod", dir_ / "p.txt", dir_ / "p"), &log), 0) << log;
  // Printable ASCII byte b is GPT-2 id b - 33; "\n" is 198.
  std::string bin;
  for (uint16_t t : {64, 198, 65, 50256, 66, 50256}) put<uint16_t>(&bin, t);
  EXPECT_EQ(read_bytes(dir_ / "p_text_document.bin"), bin);
  EXPECT_EQ(read_bytes(dir_ / "p_text_document.idx"), hand_idx({4, 2}));
}

TEST_F(PreprocessCli, EveryJsonKeyGetsItsOwnDataset) {
  std::ofstream(dir_ / "k.jsonl") << R"({"text": "Hello world", "title": " Hello"})" "\n";
  std::string log;
  ASSERT_EQ(preprocess(fmt::format("--input {} --output-prefix {} --json-keys text title",
                                   dir_ / "k.jsonl", dir_ / "k"), &log), 0) << log;
  EXPECT_EQ(read_bytes(dir_ / "k_text_document.idx"), hand_idx({2}));
  EXPECT_EQ(read_bytes(dir_ / "k_title_document.idx"), hand_idx({1}));
  std::string bin;
  put<uint16_t>(&bin, 18435);
  EXPECT_EQ(read_bytes(dir_ / "k_title_document.bin"), bin);
}

// SentencePiece through the CLI: a model trained at test time on Chinese
// text; the .bin must hold exactly spm_encode's ids (plus </s> = 2).
TEST(PreprocessCliSentencePiece, BinHoldsSpmEncodeIds) {
  if (env("TRIPOD_BIN").empty()) GTEST_SKIP() << "TRIPOD_BIN is not set (run through ctest)";
  if (std::system("command -v spm_train >/dev/null && command -v spm_encode >/dev/null") != 0)
    GTEST_SKIP() << "spm_train/spm_encode missing (apt-get install sentencepiece)";
  TempDir dir;
  {
    std::ofstream f(dir / "zh.txt");
    for (int rep = 0; rep < 30; ++rep)
      f << "天地玄黄，宇宙洪荒。日月盈昃，辰宿列张。\n寒来暑往，秋收冬藏。闰余成岁，律吕调阳。\n"
        << "云腾致雨，露结为霜。金生丽水，玉出昆冈。\n剑号巨阙，珠称夜光。果珍李柰，菜重芥姜。\n";
  }
  ASSERT_EQ(std::system(fmt::format("spm_train --input={} --model_prefix={} --vocab_size=70 "
                                    "--character_coverage=1.0 --minloglevel=2 > /dev/null 2>&1",
                                    dir / "zh.txt", dir / "zh").c_str()), 0);
  std::ofstream(dir / "in.txt") << "天地玄黄，宇宙洪荒。\n金生丽水，玉出昆冈。\n";
  const std::string cmd = fmt::format(
      "{} preprocess --input {} --input-format text --output-prefix {} --tokenizer-type "
      "SentencePieceTokenizer --tokenizer-model {} --append-eod --workers 2 > {} 2>&1",
      env("TRIPOD_BIN"), dir / "in.txt", dir / "out", dir / "zh.model", dir / "log");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_bytes(dir / "log");
  ASSERT_EQ(std::system(fmt::format("spm_encode --model={} --output_format=id < {} > {}",
                                    dir / "zh.model", dir / "in.txt", dir / "ids").c_str()), 0);
  std::string bin;
  std::istringstream ids(read_bytes(dir / "ids"));
  std::string line;
  std::vector<int32_t> lengths;
  while (std::getline(ids, line)) {
    std::istringstream ls(line);
    int32_t n = 0;
    for (int x; ls >> x; ++n) put<uint16_t>(&bin, static_cast<uint16_t>(x));
    put<uint16_t>(&bin, 2);
    lengths.push_back(n + 1);
  }
  ASSERT_EQ(lengths.size(), 2u);
  EXPECT_EQ(read_bytes(dir / "out_text_document.bin"), bin);
  EXPECT_EQ(read_bytes(dir / "out_text_document.idx"), hand_idx(lengths));
}

// NOTE [Temporaries] in base/temp_files.h. Starts `tripod preprocess` on a
// large input, waits for its .bin temporary, sends `sig`; returns the names
// left in `dir` that hold ".tmp-" and the exit status as the shell saw it.
std::vector<std::string> interrupt_preprocess(const TempDir& dir, const char* sig, int* status) {
  const auto& g = gpt2_files();
  const std::string run = fmt::format(
      "{} preprocess --tokenizer-type GPT2BPETokenizer --vocab-file {} --merge-file {} --input {} "
      "--input-format text --output-prefix {} --workers 1 --no-progress > {} 2>&1",
      env("TRIPOD_BIN"), g.vocab, g.merges, dir / "big.txt", dir / "out", dir / "killed.log");
  const std::string script = fmt::format(
      "{} & pid=$!; for i in $(seq 2000); do ls {} | grep -q 'bin.tmp-' && break; sleep 0.005; done; "
      "kill -{} $pid; wait $pid; echo $? > {}",
      run, dir.path(), sig, dir / "rc");
  const std::string shell = dir / "kill.sh";
  std::ofstream(shell) << script << "\n";
  std::system(("bash " + shell + " 2>/dev/null").c_str());  // no "Killed" line from bash
  *status = std::atoi(read_bytes(dir / "rc").c_str());
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) left.push_back(e.path().string());
  return left;
}

void write_big_input(const TempDir& dir) {
  std::ofstream f(dir / "big.txt");
  for (int i = 0; i < 400000; ++i) f << "In the beginning God created the heaven and the earth " << i << ".\n";
}

// SIGKILL cannot be caught: the .bin temporary stays, and the next run into
// the same folder removes it (its process is gone), says so, and finishes.
TEST_F(PreprocessCli, RerunRemovesTemporariesOfAKilledRun) {
  write_big_input(dir_);
  int status = 0;
  const auto left = interrupt_preprocess(dir_, "KILL", &status);
  ASSERT_EQ(status, 128 + SIGKILL) << read_bytes(dir_ / "killed.log");
  ASSERT_FALSE(left.empty()) << "the killed run left no temporary: nothing to test";
  std::ofstream(dir_ / "small.txt") << "Hello world\n";
  std::string log;
  ASSERT_EQ(preprocess(fmt::format("--input {} --input-format text --output-prefix {}", dir_ / "small.txt",
                                   dir_ / "out"), &log), 0) << log;
  for (const auto& f : left) {
    EXPECT_FALSE(std::filesystem::exists(f)) << f;
    EXPECT_NE(log.find("removed " + f), std::string::npos) << log;
  }
  EXPECT_NE(log.find("a temporary file left by process"), std::string::npos) << log;
  EXPECT_TRUE(std::filesystem::exists(dir_ / "out_text_document.bin"));
}

// SIGTERM and SIGINT: the run removes its own temporaries, then dies of the signal.
TEST_F(PreprocessCli, SigtermAndSigintRemoveTheTemporaries) {
  write_big_input(dir_);
  for (const char* sig : {"TERM", "INT"}) {
    int status = 0;
    const auto left = interrupt_preprocess(dir_, sig, &status);
    EXPECT_EQ(status, 128 + (std::string(sig) == "TERM" ? SIGTERM : SIGINT)) << sig << read_bytes(dir_ / "killed.log");
    EXPECT_TRUE(left.empty()) << sig << ": " << (left.empty() ? "" : left.front());
    EXPECT_FALSE(std::filesystem::exists(dir_ / "out_text_document.bin")) << sig;
  }
}

// Peak RSS of `cmd` (KiB), run by a forked child so that getrusage's
// RUSAGE_CHILDREN sees only it; -1 on failure.
long peak_rss_kib(const std::string& cmd) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    long r = -1;
    if (std::system(cmd.c_str()) == 0) {
      rusage u {};
      ::getrusage(RUSAGE_CHILDREN, &u);
      r = u.ru_maxrss;
    }
    (void)!::write(fds[1], &r, sizeof r);
    ::_exit(0);
  }
  ::close(fds[1]);
  long r = -1;
  if (::read(fds[0], &r, sizeof r) != sizeof r) r = -1;
  ::close(fds[0]);
  ::waitpid(pid, nullptr, 0);
  return r;
}

// docs/data.md's bound, above the size of the binary at start-up (measured
// here with `tripod --version`: ~10 MB for a CPU build, ~230 MB for a CUDA
// build, whose cuBLASLt/NCCL libraries are mapped at load): the GPT-2
// tokenizer and fixed buffers (~30 MB measured with 1 worker), about 5 MB per worker (two ~1 MiB batches of text
// and their ids in flight, a 2 MiB piece cache) and 4 bytes per document.
// Checked with room: 48 MB + 6 MB per worker + 8 bytes per document (the
// lengths' vector may hold twice its size). 16 workers on KJV x100 peaked at
// 222 MB before batch buffers were mapped (above this bound at 16 workers:
// 48 + 96 + 26 = 170 MB); 130 MB after.
TEST_F(PreprocessCli, PeakMemoryIsBoundedByTheWorkers) {
  write_big_input(dir_);  // 400,000 lines, 24 MB
  const auto& g = gpt2_files();
  const int workers = 8;
  const long kib = peak_rss_kib(fmt::format(
      "{} preprocess --tokenizer-type GPT2BPETokenizer --vocab-file {} --merge-file {} --input {} --input-format text "
      "--output-prefix {} --workers {} --no-progress > {} 2>&1",
      env("TRIPOD_BIN"), g.vocab, g.merges, dir_ / "big.txt", dir_ / "out", workers, dir_ / "log"));
  ASSERT_GT(kib, 0) << read_bytes(dir_ / "log");
  const long start_kib = peak_rss_kib(fmt::format("{} --version > /dev/null 2>&1", env("TRIPOD_BIN")));
  ASSERT_GT(start_kib, 0);
  const double start = static_cast<double>(start_kib) * 1024 / 1e6;
  const double mb = static_cast<double>(kib) * 1024 / 1e6, bound = start + 38 + 6 * workers + 8 * 400000 / 1e6;
  std::printf("peak RSS %.1f MB with %d workers (start-up %.1f MB; bound %.1f MB)\n", mb, workers, start, bound);
  EXPECT_LT(mb, bound);
}

}  // namespace
}  // namespace tripod::data
