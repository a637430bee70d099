// Implementation of data/gpt2_bpe.h: GPT-2's byte alphabet, loading
// encoder.json / vocab.bpe, and the encode loop (BPE itself: data/byte_bpe.h).
// Reference: OpenAI gpt-2 src/encoder.py (bytes_to_unicode, bpe, encode).
#include "data/gpt2_bpe.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <unordered_map>

#include "base/error.h"
#include "data/gpt2_pretokenizer.h"
#include "data/utf8.h"

namespace tripod::data {

// ---- byte <-> unicode ----

uint32_t gpt2_byte_to_unicode(uint8_t b) {
  // Printable Latin-1 bytes map to themselves; the other 68 bytes, in order,
  // to U+0100, U+0101, ...
  auto printable = [](int x) { return (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE; };
  if (printable(b)) return b;
  uint32_t n = 0;
  for (int x = 0; x < b; ++x) n += !printable(x);
  return 256 + n;
}

bool gpt2_token_bytes(std::string_view s, std::string* out) {
  static const std::vector<int16_t> decoder = [] {
    std::vector<int16_t> d(0x144, -1);
    for (int b = 0; b < 256; ++b) d[gpt2_byte_to_unicode(static_cast<uint8_t>(b))] = static_cast<int16_t>(b);
    return d;
  }();
  out->clear();
  if (!is_valid_utf8(s)) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    int len;
    const uint32_t cp = decode_utf8(p + i, &len);
    if (cp >= decoder.size() || decoder[cp] < 0) return false;
    out->push_back(static_cast<char>(decoder[cp]));
    i += static_cast<size_t>(len);
  }
  return true;
}

// ---- loading ----

GPT2BPETokenizer::GPT2BPETokenizer(const std::string& vocab_file, const std::string& merge_file)
    : vocab_file_(vocab_file) {
  const char* hint = "fetch GPT-2's files with scripts/get_gpt2_vocab.sh and pass "
                     "--vocab-file .../encoder.json --merge-file .../vocab.bpe";

  std::ifstream vf(vocab_file);
  TRIPOD_CHECK_HINT(vf.good(), hint, "cannot open --vocab-file {}", vocab_file);
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(vf);
  } catch (const std::exception& e) {
    TRIPOD_FAIL("--vocab-file {} is not valid JSON: {}", vocab_file, e.what());
  }
  TRIPOD_CHECK_HINT(vocab.is_object() && !vocab.empty(), hint,
                    "--vocab-file {} must be a JSON object {{token: id}}", vocab_file);
  id_to_bytes_.resize(vocab.size());
  std::vector<bool> seen(vocab.size(), false);
  std::unordered_map<std::string, int32_t> bytes_to_id;
  std::string raw;
  for (auto& [tok, idv] : vocab.items()) {
    TRIPOD_CHECK(idv.is_number_integer(), "{}: id of '{}' is not an integer", vocab_file, tok);
    const int64_t id = idv.get<int64_t>();
    TRIPOD_CHECK(id >= 0 && id < static_cast<int64_t>(vocab.size()) && !seen[id],
                 "{}: ids must be 0..{} without repeats; '{}' has {}", vocab_file,
                 vocab.size() - 1, tok, id);
    seen[id] = true;
    TRIPOD_CHECK_HINT(gpt2_token_bytes(tok, &raw), hint,
                      "{}: token '{}' is not in GPT-2's byte alphabet", vocab_file, tok);
    id_to_bytes_[id] = raw;
    bytes_to_id.emplace(raw, static_cast<int32_t>(id));
  }
  int32_t byte_id[256];
  for (int b = 0; b < 256; ++b) {
    auto it = bytes_to_id.find(std::string(1, static_cast<char>(b)));
    TRIPOD_CHECK(it != bytes_to_id.end(), "{}: no token for byte {}", vocab_file, b);
    byte_id[b] = it->second;
  }
  auto eod = bytes_to_id.find("<|endoftext|>");
  TRIPOD_CHECK_HINT(eod != bytes_to_id.end(), hint, "{} has no <|endoftext|> token", vocab_file);
  eod_ = eod->second;

  std::ifstream mf(merge_file);
  TRIPOD_CHECK_HINT(mf.good(), hint, "cannot open --merge-file {}", merge_file);
  std::string line, a, b;
  std::vector<ByteBpe::Merge> merges;
  for (int64_t lineno = 1; std::getline(mf, line); ++lineno) {
    if ((lineno == 1 && line.rfind("#version", 0) == 0) || line.empty()) continue;
    const size_t sp = line.find(' ');
    TRIPOD_CHECK_HINT(sp != std::string::npos && line.find(' ', sp + 1) == std::string::npos, hint,
                      "{}:{}: a merge line is two tokens separated by one space", merge_file, lineno);
    const bool ok = gpt2_token_bytes(line.substr(0, sp), &a) &&
                    gpt2_token_bytes(line.substr(sp + 1), &b);
    auto ia = bytes_to_id.find(a), ib = bytes_to_id.find(b), im = bytes_to_id.find(a + b);
    TRIPOD_CHECK_HINT(ok && ia != bytes_to_id.end() && ib != bytes_to_id.end() &&
                          im != bytes_to_id.end(),
                      "use the merges file that belongs to --vocab-file",
                      "{}:{}: merge '{}' uses or makes a token missing from {}", merge_file,
                      lineno, line, vocab_file);
    merges.push_back({ia->second, ib->second, im->second});
  }
  TRIPOD_CHECK_HINT(!merges.empty(), hint, "--merge-file {} has no merges", merge_file);
  bpe_ = std::make_unique<ByteBpe>(byte_id, merges, /*keep_last_duplicate=*/false);
}

GPT2BPETokenizer::~GPT2BPETokenizer() = default;

std::string GPT2BPETokenizer::describe() const {
  return fmt::format("GPT2BPETokenizer ({} tokens, eod {}, from {})", vocab_size(), eod_,
                     vocab_file_);
}

void GPT2BPETokenizer::bpe(std::string_view piece, std::vector<int32_t>* out) const {
  bpe_->bpe(piece, out);
}

// ---- encode / decode ----

void GPT2BPETokenizer::encode(std::string_view text, std::vector<int32_t>* out) const {
  if (is_valid_utf8(text)) {
    encode_valid(text, out);
  } else {
    const std::string fixed = repair_utf8(text);
    encode_valid(fixed, out);
  }
}

void GPT2BPETokenizer::encode_valid(std::string_view text, std::vector<int32_t>* out) const {
  thread_local std::vector<int32_t> scratch;  // ids of this call; a piece of n bytes has <= n ids
  ByteBpe::Cache& cache = bpe_->thread_cache();
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  if (scratch.size() < n + ByteBpe::kMaxCachedIds) scratch.resize(n + ByteBpe::kMaxCachedIds);
  int32_t* dst = scratch.data();
  const unicode::ClassTable ct = unicode::class_table();
  for (size_t i = 0; i < n;) {
    const size_t j = gpt2_piece_end(s, n, i, ct);
    dst += bpe_->encode_piece(s + i, j - i, dst, cache);
    i = j;
  }
  out->insert(out->end(), scratch.data(), dst);
}

std::string GPT2BPETokenizer::decode(std::span<const int32_t> ids) const {
  std::string s;
  for (int32_t id : ids) {
    TRIPOD_CHECK(id >= 0 && id < vocab_size(), "token id {} is outside the GPT-2 vocab of {}", id,
                 vocab_size());
    s += id_to_bytes_[id];
  }
  return s;
}

}  // namespace tripod::data
