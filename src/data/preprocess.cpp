// Implementation of data/preprocess.h. See NOTE [Preprocess pipeline].
// Reference for the flags and outputs: Megatron-LM tools/preprocess_data.py.
#include "data/preprocess.h"

#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "base/temp_files.h"
#include "base/timer.h"
#include "data/indexed_dataset.h"
#include "data/utf8.h"

namespace tripod::data {
namespace {

// Whole records of the input: text[offsets[i], offsets[i+1]) is record i,
// which starts on line lines[i].
struct Batch {
  int64_t seq = 0;
  std::string text;
  std::vector<size_t> offsets{0};
  std::vector<int64_t> lines;
  int64_t bytes = 0;  // input bytes consumed, separators included
};

// Tokens of one batch, per key: tokens back to back and document lengths
// (0: an empty document, which has no sequence; see NOTE [Empty documents]).
struct Result {
  std::vector<std::vector<int32_t>> tokens, lengths;
  int64_t records = 0, skipped_invalid = 0, skipped_blank = 0, utf8_repaired = 0, bytes = 0;
  std::string error, hint;  // first error of the batch (then the run stops)
};

// Reads records from the input in batches. Lines are split with memchr over
// 4 MiB blocks; text-paragraphs joins lines until a blank one.
class RecordReader {
 public:
  RecordReader(const PreprocessConfig& c) : config_(c) {
    struct stat st {};
    TRIPOD_CHECK_HINT(::stat(c.input.c_str(), &st) == 0, "check the path given to --input",
                      "cannot open --input {}: {}", c.input, std::strerror(errno));
    // fopen opens a folder; its first read would fail with EISDIR.
    TRIPOD_CHECK_HINT(!S_ISDIR(st.st_mode),
                      "pass one file; for several, run preprocess once per file and train on all of them "
                      "with --data-path W1 PREFIX1 W2 PREFIX2 ... (or concatenate the files first)",
                      "--input {} is a folder: tripod preprocess reads one file", c.input);
    file_ = std::fopen(c.input.c_str(), "rb");
    TRIPOD_CHECK_HINT(file_, "check --input", "cannot open --input {}: {}", c.input,
                      std::strerror(errno));
    paragraphs_ = c.input_format == "text-paragraphs";
  }
  ~RecordReader() { std::fclose(file_); }

  // Next batch, or nullopt at the end of the input. Lines are appended to
  // the batch text directly (one copy from the read buffer).
  std::optional<Batch> next(int64_t seq) {
    Batch b;
    b.seq = seq;
    b.text.reserve(static_cast<size_t>(config_.batch_bytes) + 4096);
    bool in_paragraph = false;
    int64_t paragraph_line = 0, lineno;
    for (;;) {
      // A paragraph in progress is finished even past the batch size.
      if (static_cast<int64_t>(b.text.size()) >= config_.batch_bytes && !in_paragraph) break;
      const size_t start = b.text.size();
      if (in_paragraph) b.text += '\n';
      const size_t body = b.text.size();
      if (!read_line(&b.text, &lineno, &b.bytes)) {
        b.text.resize(start);
        break;
      }
      if (!paragraphs_) {
        close(&b, lineno);
        continue;
      }
      const bool blank = std::string_view(b.text).substr(body).find_first_not_of(" \t\r\f\v") ==
                         std::string_view::npos;
      if (blank) {
        b.text.resize(start);
        if (in_paragraph) close(&b, paragraph_line);
        in_paragraph = false;
        continue;
      }
      if (!in_paragraph) paragraph_line = lineno;
      in_paragraph = true;
    }
    if (in_paragraph) close(&b, paragraph_line);
    if (b.lines.empty() && b.bytes == 0) return std::nullopt;
    return b;
  }

 private:
  void close(Batch* b, int64_t lineno) {
    b->offsets.push_back(b->text.size());
    b->lines.push_back(lineno);
  }
  // Appends one line without its "\n" (and "\r\n" for text input) to *dst;
  // false at the end of the input.
  bool read_line(std::string* dst, int64_t* lineno, int64_t* consumed) {
    const size_t start = dst->size();
    bool any = false;
    for (;;) {
      if (pos_ == len_) {
        errno = 0;
        len_ = std::fread(buf_.get(), 1, kBufferBytes, file_);
        TRIPOD_CHECK(!std::ferror(file_), "reading --input {} failed: {}", config_.input,
                     std::strerror(errno));
        pos_ = 0;
        if (len_ == 0) {
          if (!any) return false;
          break;  // last line without "\n"
        }
      }
      any = true;
      const char* from = buf_.get() + pos_;
      const void* nl = std::memchr(from, '\n', len_ - pos_);
      const size_t take = nl ? static_cast<const char*>(nl) - from : len_ - pos_;
      dst->append(from, take);
      pos_ += take + (nl ? 1 : 0);
      *consumed += static_cast<int64_t>(take + (nl ? 1 : 0));
      if (nl) break;
    }
    *lineno = ++line_;
    if (config_.input_format != "jsonl" && dst->size() > start && dst->back() == '\r') dst->pop_back();
    return true;
  }

  static constexpr size_t kBufferBytes = 1 << 22;
  const PreprocessConfig& config_;
  std::FILE* file_;
  bool paragraphs_ = false;
  std::unique_ptr<char[]> buf_ = std::make_unique<char[]>(kBufferBytes);
  size_t pos_ = 0, len_ = 0;
  int64_t line_ = 0;
};

// SAX handler that keeps only the string values of the wanted top-level keys
// (no DOM: a JSONL line is parsed without allocating its other values).
// nlohmann-json still validates the whole line.
class KeyGrabber final : public nlohmann::json_sax<nlohmann::json> {
 public:
  KeyGrabber(const std::vector<std::string>& keys, std::vector<std::string>* values)
      : keys_(keys), values_(values), state_(keys.size(), kMissing) {
    values_->assign(keys.size(), {});
  }
  bool null() override { return scalar(); }
  bool boolean(bool) override { return scalar(); }
  bool number_integer(number_integer_t) override { return scalar(); }
  bool number_unsigned(number_unsigned_t) override { return scalar(); }
  bool number_float(number_float_t, const string_t&) override { return scalar(); }
  bool binary(binary_t&) override { return scalar(); }
  bool string(string_t& v) override {
    if (depth_ == 1 && pending_ >= 0) {
      (*values_)[pending_] = std::move(v);  // a repeated key: the last one wins, as in the DOM
      state_[pending_] = kString;
      pending_ = -1;
      return true;
    }
    return scalar();
  }
  bool start_object(std::size_t) override {
    if (depth_ == 0) top_is_object_ = true;
    value_start();
    ++depth_;
    return true;
  }
  bool key(string_t& k) override {
    if (depth_ == 1) {
      pending_ = -1;
      for (size_t i = 0; i < keys_.size(); ++i)
        if (keys_[i] == k) pending_ = static_cast<int>(i);
    }
    return true;
  }
  bool end_object() override { --depth_; return true; }
  bool start_array(std::size_t) override { value_start(); ++depth_; return true; }
  bool end_array() override { --depth_; return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& e) override {
    error_ = fmt::format("malformed JSON: {}", e.what());
    return false;
  }
  // "" when every key holds a string, else what is wrong with the line.
  std::string problem() const {
    if (!error_.empty()) return error_;
    if (!top_is_object_) return "the line is not a JSON object";
    for (size_t i = 0; i < keys_.size(); ++i) {
      if (state_[i] == kMissing) return fmt::format("missing key '{}'", keys_[i]);
      if (state_[i] == kOther) return fmt::format("key '{}' is not a string", keys_[i]);
    }
    return {};
  }

 private:
  enum State : uint8_t { kMissing, kString, kOther };
  // A non-string value (scalar or container) of a wanted key at depth 1.
  void value_start() {
    if (depth_ == 1 && pending_ >= 0) state_[pending_] = kOther;
    if (depth_ == 1) pending_ = -1;
  }
  bool scalar() {
    value_start();
    return true;
  }
  const std::vector<std::string>& keys_;
  std::vector<std::string>* values_;
  std::vector<State> state_;
  int depth_ = 0, pending_ = -1;
  bool top_is_object_ = false;
  std::string error_;
};

std::string extract_keys(std::string_view line, const std::vector<std::string>& keys,
                         std::vector<std::string>* values) {
  KeyGrabber grabber(keys, values);
  try {
    nlohmann::json::sax_parse(line, &grabber);
  } catch (const nlohmann::json::exception& e) {
    return fmt::format("malformed JSON: {}", e.what());
  }
  return grabber.problem();
}

void tokenize_batch(const PreprocessConfig& c, const Tokenizer& tok, const Batch& b, Result* r) {
  const size_t nkeys = c.json_keys.size();
  r->tokens.assign(nkeys, {});
  r->lengths.assign(nkeys, {});
  r->bytes = b.bytes;
  const bool jsonl = c.input_format == "jsonl";
  std::vector<int32_t> ids;
  std::string repaired;
  for (size_t i = 0; i + 1 < b.offsets.size(); ++i) {
    ++r->records;
    std::string_view rec(b.text.data() + b.offsets[i], b.offsets[i + 1] - b.offsets[i]);
    if (!is_valid_utf8(rec)) {
      ++r->utf8_repaired;
      repaired = repair_utf8(rec);
      rec = repaired;
    }
    std::vector<std::string> parsed;
    std::string_view text_record;
    // A blank line is no record (Megatron's json.loads stops on it).
    if (jsonl ? rec.find_first_not_of(" \t\r") == std::string_view::npos : rec.empty()) {
      ++r->skipped_blank;
      continue;
    }
    if (jsonl) {
      std::string problem = extract_keys(rec, c.json_keys, &parsed);
      if (!problem.empty()) {
        if (c.skip_invalid) {
          ++r->skipped_invalid;
          continue;
        }
        r->error = fmt::format("{}:{}: {}", c.input, b.lines[i], problem);
        const size_t first = rec.find_first_not_of(" \t\r");
        r->hint = first != std::string_view::npos && rec[first] != '{'
                      ? "this line is not a JSON object: for plain text (one document per line) pass "
                        "--input-format text; for JSON lines, fix the line or pass --skip-invalid"
                      : "fix the line, choose the keys with --json-keys, or pass --skip-invalid to "
                        "skip (and count) such lines";
        return;
      }
    } else {
      text_record = rec;
    }
    for (size_t k = 0; k < nkeys; ++k) {
      ids.clear();
      tok.encode(jsonl ? std::string_view(parsed[k]) : text_record, &ids);
      // NOTE [Empty documents]: a record that encodes to no tokens is an
      // empty document, without an end-of-document token, as Megatron's
      // preprocess_data.py writes it (`if len(doc_ids) > 0 and append_eod`).
      if (!ids.empty() && c.append_eod) ids.push_back(tok.eod());
      r->tokens[k].insert(r->tokens[k].end(), ids.begin(), ids.end());
      r->lengths[k].push_back(static_cast<int32_t>(ids.size()));
    }
  }
}

// Progress: a one-line bar on a terminal, plain log lines otherwise.
class Progress {
 public:
  Progress(const PreprocessConfig& c, int64_t total) : c_(c), total_(total), tty_(::isatty(2)) {}
  void update(const PreprocessStats& s, bool force = false) {
    if (!c_.progress) return;
    const double t = timer_.seconds();
    if (!force && t - last_ < (tty_ ? 0.25 : c_.log_interval_s)) return;
    last_ = t;
    const double mbs = static_cast<double>(s.input_bytes) / 1e6 / std::max(t, 1e-9);
    std::string eta = "?";
    if (total_ > 0 && s.input_bytes > 0)
      eta = fmt::format("{:.0f}s", static_cast<double>(total_ - s.input_bytes) / 1e6 / std::max(mbs, 1e-9));
    const double frac = total_ > 0 ? static_cast<double>(s.input_bytes) / static_cast<double>(total_) : 0;
    if (tty_) {
      const int width = 30, fill = static_cast<int>(frac * width);
      std::fprintf(stderr, "\r[%s%s] %5.1f%% %lld docs, %.1f MB/s, ETA %s   ",
                   std::string(fill, '#').c_str(), std::string(width - fill, '.').c_str(),
                   100 * frac, static_cast<long long>(s.documents), mbs, eta.c_str());
      std::fflush(stderr);
    } else {
      log::info("preprocess: {:.1f}% {} docs, {} tokens, {:.1f} MB/s, ETA {}", 100 * frac,
                s.documents, s.tokens, mbs, eta);
    }
  }
  void finish() {
    if (c_.progress && tty_) std::fprintf(stderr, "\n");
  }

 private:
  const PreprocessConfig& c_;
  int64_t total_;
  bool tty_;
  Timer timer_;
  double last_ = 0;
};

void validate(const PreprocessConfig& c) {
  TRIPOD_CHECK_HINT(!c.input.empty(), "e.g. --input corpus.jsonl", "--input is required");
  TRIPOD_CHECK_HINT(!c.output_prefix.empty(), "e.g. --output-prefix data/my-corpus",
                    "--output-prefix is required");
  TRIPOD_CHECK_HINT(c.input_format == "jsonl" || c.input_format == "text" ||
                        c.input_format == "text-paragraphs",
                    "use jsonl, text (one document per line) or text-paragraphs",
                    "unknown --input-format '{}'", c.input_format);
  TRIPOD_CHECK_HINT(c.workers >= 1, "e.g. --workers 4", "--workers must be at least 1");
  TRIPOD_CHECK_HINT(!c.json_keys.empty(), "e.g. --json-keys text", "--json-keys is empty");
  TRIPOD_CHECK_HINT(c.input_format == "jsonl" || c.json_keys.size() == 1,
                    "--json-keys only applies to --input-format jsonl",
                    "plain text input has one document stream");
}

// The threads of NOTE [Preprocess pipeline]. next() hands out the results in
// input order; the destructor stops and joins every thread (also on errors).
class Pipeline {
 public:
  Pipeline(const PreprocessConfig& c, const Tokenizer& tok, RecordReader& reader)
      : c_(c), tok_(tok), reader_(reader), max_in_flight_(2 * c.workers + 2) {
    threads_.emplace_back([this] { read_loop(); });
    for (int w = 0; w < c.workers; ++w) threads_.emplace_back([this] { work_loop(); });
  }
  ~Pipeline() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // The next batch's result, or nullopt after the last one.
  std::optional<Result> next() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] {
      return done_.count(next_) || (produced_ >= 0 && next_ >= produced_) || !reader_error_.empty();
    });
    TRIPOD_CHECK(reader_error_.empty(), "{}", reader_error_);
    auto it = done_.find(next_);
    if (it == done_.end()) return std::nullopt;
    Result r = std::move(it->second);
    done_.erase(it);
    ++next_;
    --in_flight_;
    cv_.notify_all();
    return r;
  }

 private:
  void read_loop() {
    try {
      for (int64_t seq = 0;; ++seq) {
        {
          std::unique_lock lk(mu_);
          cv_.wait(lk, [&] { return stop_ || in_flight_ < max_in_flight_; });
          if (stop_) return;
        }
        auto b = reader_.next(seq);  // file I/O outside the lock
        std::lock_guard lk(mu_);
        if (!b) {
          produced_ = seq;
        } else {
          ++in_flight_;
          todo_.push_back(std::move(*b));
        }
        cv_.notify_all();
        if (!b) return;
      }
    } catch (const std::exception& e) {
      std::lock_guard lk(mu_);
      reader_error_ = e.what();
      cv_.notify_all();
    }
  }

  void work_loop() {
    for (;;) {
      Batch b;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !todo_.empty() || produced_ >= 0; });
        if (stop_ || todo_.empty()) return;
        b = std::move(todo_.front());
        todo_.pop_front();
      }
      Result r;
      try {
        tokenize_batch(c_, tok_, b, &r);
      } catch (const std::exception& e) {
        r.error = e.what();
      }
      std::lock_guard lk(mu_);
      done_.emplace(b.seq, std::move(r));
      cv_.notify_all();
    }
  }

  const PreprocessConfig& c_;
  const Tokenizer& tok_;
  RecordReader& reader_;
  const int64_t max_in_flight_;
  // One mutex for all shared state: batches are ~1 MiB, contention is negligible.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> todo_;
  std::map<int64_t, Result> done_;
  int64_t in_flight_ = 0, next_ = 0;
  int64_t produced_ = -1;  // number of batches, once the reader reached the end
  bool stop_ = false;
  std::string reader_error_;
  std::vector<std::thread> threads_;
};

int64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

}  // namespace

std::string output_name(const std::string& output_prefix, const std::string& key) {
  return fmt::format("{}_{}_document", output_prefix, key);
}

PreprocessStats preprocess(const PreprocessConfig& c) {
  validate(c);
  const auto tok = make_tokenizer(c.tokenizer);
  if (c.append_eod) (void)tok->eod();  // fail now if the tokenizer has none
  const TokenDType dtype = dtype_for_vocab(tok->vocab_size());
  PreprocessStats stats;
  // Temporaries of earlier runs that were killed (SIGKILL, a crash) before they could remove them.
  remove_stale_temporaries(std::filesystem::path(c.output_prefix).parent_path().string());
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const auto& key : c.json_keys) {
    const std::string name = output_name(c.output_prefix, c.input_format == "jsonl" ? key : "text");
    writers.push_back(std::make_unique<IndexedDatasetWriter>(name, dtype));
    stats.outputs.push_back(name);
  }
  RecordReader reader(c);
  log::info("preprocess: {} -> {}_*_document.bin/.idx with {}, {} worker(s)", c.input,
            c.output_prefix, tok->describe(), c.workers);
  Progress progress(c, file_size(c.input));
  Timer timer;
  {
    // Declared after the writers: on an error the threads stop first, then
    // the writers' destructors remove the temporary files.
    Pipeline pipeline(c, *tok, reader);
    while (auto r = pipeline.next()) {
      if (!r->error.empty()) {
        progress.finish();
        ::tripod::detail::check_failed(nullptr, __FILE__, __LINE__, r->error, r->hint);
      }
      for (size_t k = 0; k < writers.size(); ++k) {
        size_t at = 0;
        for (int32_t len : r->lengths[k]) {
          if (len == 0) {
            writers[k]->add_empty_document();
            ++stats.empty_documents;
            continue;
          }
          writers[k]->add_document(r->tokens[k].data() + at, len);
          at += static_cast<size_t>(len);
        }
        stats.documents += static_cast<int64_t>(r->lengths[k].size());
        stats.tokens += static_cast<int64_t>(r->tokens[k].size());
      }
      stats.records += r->records;
      stats.skipped_invalid += r->skipped_invalid;
      stats.skipped_blank += r->skipped_blank;
      stats.utf8_repaired += r->utf8_repaired;
      stats.input_bytes += r->bytes;
      progress.update(stats);
    }
  }
  for (auto& w : writers) w->finish();
  // An empty dataset is what Megatron writes too, so it is written; training on it stops naming it.
  if (stats.tokens == 0) {
    const std::string what =
        stats.documents == 0
            ? fmt::format("holds no documents ({} records read; {} blank and {} invalid lines skipped)",
                          stats.records, stats.skipped_blank, stats.skipped_invalid)
            : fmt::format("holds only empty documents ({}, no tokens)", stats.documents);
    log::warn("preprocess: --input {} {}: {} is an empty dataset and training on it will stop. Check the "
              "file, --input-format and --json-keys",
              c.input, what, stats.outputs.front());
  }
  stats.seconds = timer.seconds();
  progress.update(stats, true);
  progress.finish();
  return stats;
}

}  // namespace tripod::data
