// Implementation of data/hf_tokenizer.h: reading tokenizer.json, the added
// token trie, NFC through ICU, and the encode loop.
#include "data/hf_tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "base/error.h"
#include "data/gpt2_bpe.h"
#include "data/utf8.h"

#ifdef TRIPOD_WITH_ICU
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#endif

namespace tripod::data {

using nlohmann::json;

// ---- added tokens: a byte trie, leftmost-longest matching ----

struct HuggingFaceTokenizer::AddedTokens {
  struct Node {
    int32_t token = -1;  // index into added_, or -1
  };
  std::vector<Node> nodes = std::vector<Node>(1);
  std::unordered_map<uint64_t, int32_t> next;  // (node << 8 | byte) -> node
  bool first[256] = {};
  int first_count = 0;
  unsigned char only_first = 0;  // the first byte of every token when first_count == 1

  void add(std::string_view s, int32_t token) {
    int32_t n = 0;
    for (unsigned char c : s) {
      const uint64_t k = (static_cast<uint64_t>(n) << 8) | c;
      auto it = next.find(k);
      if (it == next.end()) {
        it = next.emplace(k, static_cast<int32_t>(nodes.size())).first;
        nodes.emplace_back();
      }
      n = it->second;
    }
    if (nodes[n].token < 0) nodes[n].token = token;  // the first of equal contents
    const auto f = static_cast<unsigned char>(s[0]);
    if (!first[f]) {
      first[f] = true;
      ++first_count;
      only_first = f;
    }
  }
  // Where a token may start at or after i: memchr when every token starts
  // with the same byte (Llama 3's and Qwen2's all start with '<').
  size_t next_candidate(const unsigned char* s, size_t n, size_t i) const {
    if (first_count == 1) {
      const void* p = std::memchr(s + i, only_first, n - i);
      return p ? static_cast<size_t>(static_cast<const unsigned char*>(p) - s) : n;
    }
    while (i < n && !first[s[i]]) ++i;
    return i;
  }
  bool empty() const { return nodes.size() == 1; }
  // The longest token starting at s[i]: its index (or -1) and *len.
  int32_t match(const unsigned char* s, size_t n, size_t i, size_t* len) const {
    int32_t node = 0, best = -1;
    for (size_t j = i; j < n; ++j) {
      auto it = next.find((static_cast<uint64_t>(node) << 8) | s[j]);
      if (it == next.end()) break;
      node = it->second;
      if (nodes[node].token >= 0) {
        best = nodes[node].token;
        *len = j + 1 - i;
      }
    }
    return best;
  }
};

namespace {

// Ids index a table of every id up to the largest (holes allowed), so a
// corrupt id near 2^31 would ask for tens of GB: the largest vocabularies
// in use have ~256K ids; 2^24 leaves room and bounds the table to ~0.5 GB.
constexpr int64_t kMaxTokenIds = int64_t{1} << 24;

// Unicode White_Space (Rust's char::is_whitespace, for lstrip/rstrip).
bool whitespace_at(const unsigned char* s, size_t i, int* len) {
  static const unicode::ClassTable ct = unicode::oniguruma_class_table();
  if (s[i] < 0x80) {
    *len = 1;
    return s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r');
  }
  return ct(decode_utf8(s + i, len)) == unicode::CharClass::kSpace;
}

// NFC of s into *out; false (and *out untouched) when s is NFC already.
bool nfc(std::string_view s, std::string* out, const std::string& path) {
  bool ascii = true;
  for (unsigned char c : s) ascii &= c < 0x80;
  if (ascii) return false;
#ifdef TRIPOD_WITH_ICU
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(status);
  TRIPOD_CHECK(U_SUCCESS(status), "ICU has no NFC normalizer: {}", u_errorName(status));
  const icu::StringPiece piece(s.data(), static_cast<int32_t>(s.size()));
  if (n->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return false;
  status = U_ZERO_ERROR;
  out->clear();
  icu::StringByteSink<std::string> sink(out);
  n->normalizeUTF8(0, piece, sink, nullptr, status);
  TRIPOD_CHECK(U_SUCCESS(status), "NFC normalization failed: {}", u_errorName(status));
  return true;
#else
  (void)out;
  TRIPOD_FAIL("{}: the NFC normalizer needs a tripod built with ICU (apt-get install libicu-dev, "
              "then rebuild)", path);
#endif
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  TRIPOD_CHECK_HINT(f.good(),
                    "pass a local tokenizer.json, or the model folder that holds it (tripod reads no hub "
                    "names: download the file first)",
                    "cannot open --tokenizer-model {}", path);
  try {
    return json::parse(f);
  } catch (const std::exception& e) {
    TRIPOD_FAIL("--tokenizer-model {} is not valid JSON: {}", path, e.what());
  }
}

std::string type_of(const json& j) { return j.is_object() ? j.value("type", "") : ""; }

constexpr const char* kEodNames[] = {"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>"};

}  // namespace

// ---- loading ----

HuggingFaceTokenizer::HuggingFaceTokenizer(const std::string& path)
    : path_(std::filesystem::is_directory(path) ? (std::filesystem::path(path) / "tokenizer.json").string()
                                                 : path),
      raw_added_(std::make_unique<AddedTokens>()),
      normalized_added_(std::make_unique<AddedTokens>()) {
  load(path_);
}

HuggingFaceTokenizer::~HuggingFaceTokenizer() = default;

void HuggingFaceTokenizer::load(const std::string& path) {
  const json root = read_json(path);
  TRIPOD_CHECK(root.is_object() && root.contains("model"),
               "{} is not a Hugging Face tokenizer.json (no \"model\")", path);
  const char* hint =
      "tripod reads byte-level BPE tokenizer.json files (GPT-2, Llama 3, Qwen2, Mistral-Nemo style; "
      "docs/data.md); for a SentencePiece model (Llama 2, Mistral 7B) pass its tokenizer.model with "
      "--tokenizer-type SentencePieceTokenizer";
  auto refuse = [&](const std::string& component, const json& j) {
    TRIPOD_CHECK_HINT(false, hint, "{}: unsupported {}: {}", path, component, j.dump().substr(0, 300));
  };

  // normalizer
  const json& norm = root.value("normalizer", json());
  auto take_normalizer = [&](const json& n) {
    if (type_of(n) == "NFC") nfc_ = true;
    else refuse("normalizer (null or NFC only)", n);
  };
  if (type_of(norm) == "Sequence") {
    for (const json& n : norm.value("normalizers", json::array())) take_normalizer(n);
  } else if (!norm.is_null()) {
    take_normalizer(norm);
  }
#ifndef TRIPOD_WITH_ICU
  TRIPOD_CHECK_HINT(!nfc_, "apt-get install libicu-dev, then rebuild tripod",
                    "{}: the NFC normalizer needs a tripod built with ICU", path);
#endif

  // pre_tokenizer
  const json& pre = root.value("pre_tokenizer", json());
  auto byte_level = [&](const json& b, bool want_regex) {
    if (b.value("use_regex", true) != want_regex)
      refuse(want_regex ? "pre_tokenizer (ByteLevel alone must use its regex)"
                        : "pre_tokenizer (ByteLevel after Split must have use_regex false)", pre);
    add_prefix_space_ = b.value("add_prefix_space", false);
    if (add_prefix_space_ && !want_regex) refuse("pre_tokenizer (add_prefix_space after Split)", pre);
  };
  if (type_of(pre) == "ByteLevel") {
    byte_level(pre, true);
    pattern_ = HfPattern::kGpt2;
  } else if (type_of(pre) == "Sequence" && pre.value("pretokenizers", json()).size() == 2 &&
             type_of(pre["pretokenizers"][0]) == "Split" && type_of(pre["pretokenizers"][1]) == "ByteLevel") {
    const json& split = pre["pretokenizers"][0];
    const json& pat = split.value("pattern", json());
    if (!pat.is_object() || !pat.contains("Regex") || !pat["Regex"].is_string())
      refuse("Split pattern (a Regex is needed)", split);
    const std::string regex = pat["Regex"];
    const auto p = hf_pattern_from_regex(regex);
    TRIPOD_CHECK_HINT(p.has_value(), hint,
                      "{}: unsupported pre-tokenizer regex {} (tripod knows GPT-2's, Llama 3's, Qwen2's and "
                      "Mistral-Nemo's patterns, by their exact text)", path, json(regex).dump());
    pattern_ = *p;
    if (split.value("behavior", "") != "Isolated" || split.value("invert", false))
      refuse("Split behavior (Isolated, not inverted, only)", split);
    byte_level(pre["pretokenizers"][1], false);
  } else {
    refuse("pre_tokenizer (ByteLevel, or Sequence[Split(Regex), ByteLevel])", pre);
  }

  const json& dec = root.value("decoder", json());
  if (!dec.is_null() && type_of(dec) != "ByteLevel") refuse("decoder (null or ByteLevel)", dec);

  // model
  const json& model = root["model"];
  if (!model.is_object() || (model.contains("type") && type_of(model) != "BPE") ||
      !model.contains("vocab") || !model.contains("merges"))
    refuse("model (BPE with vocab and merges)", json(type_of(model)));
  if (!model.value("dropout", json()).is_null()) refuse("BPE dropout", model["dropout"]);
  if (model.value("byte_fallback", false)) refuse("BPE byte_fallback", json(true));
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!model.value(k, json()).is_null() && model[k] != "") refuse(std::string("BPE ") + k, model[k]);
  ignore_merges_ = model.value("ignore_merges", false);

  // added_tokens (their ids may lie outside model.vocab)
  std::unordered_map<int64_t, std::string> added_content;
  int64_t max_id = -1;
  for (const json& t : root.value("added_tokens", json::array())) {
    TRIPOD_CHECK(t.is_object() && t.contains("id") && t.contains("content") && t["content"].is_string() &&
                     t["id"].is_number_integer() && t["id"].get<int64_t>() >= 0 &&
                     t["id"].get<int64_t>() < kMaxTokenIds,
                 "{}: an added token needs an id (0 to {}) and a content: {}", path, kMaxTokenIds - 1, t.dump());
    if (t.value("single_word", false)) refuse("added token with single_word", t);
    AddedToken a{t["content"], t["id"].get<int32_t>(), t.value("lstrip", false), t.value("rstrip", false),
                 t.value("normalized", false)};
    TRIPOD_CHECK(!a.content.empty(), "{}: added token {} is empty", path, a.id);
    a.content = repair_utf8(a.content);
    (a.normalized ? normalized_added_ : raw_added_)->add(a.content, static_cast<int32_t>(added_.size()));
    added_content[a.id] = a.content;
    max_id = std::max<int64_t>(max_id, a.id);
    added_.push_back(std::move(a));
  }

  const json& vocab = model["vocab"];
  TRIPOD_CHECK(vocab.is_object() && !vocab.empty(), "{}: model.vocab must be an object {{token: id}}", path);
  std::unordered_map<std::string, int32_t> token_id;  // vocab strings as written
  for (auto& [tok, idv] : vocab.items()) {
    TRIPOD_CHECK(idv.is_number_integer() && idv.get<int64_t>() >= 0 && idv.get<int64_t>() < kMaxTokenIds,
                 "{}: model.vocab id of '{}' is not a token id (0 to {})", path, tok, kMaxTokenIds - 1);
    token_id.emplace(tok, idv.get<int32_t>());
    max_id = std::max<int64_t>(max_id, idv.get<int64_t>());
  }
  id_to_bytes_.assign(static_cast<size_t>(max_id + 1), std::string());
  id_known_.assign(id_to_bytes_.size(), 0);
  ByteBpe::Vocab whole;
  std::string raw;
  for (const auto& [tok, id] : token_id) {
    id_known_[id] = 1;
    if (auto it = added_content.find(id); it != added_content.end()) {
      id_to_bytes_[id] = it->second;
      continue;
    }
    TRIPOD_CHECK_HINT(gpt2_token_bytes(tok, &raw), hint,
                      "{}: model.vocab token '{}' is not in the byte-level alphabet", path, tok);
    id_to_bytes_[id] = raw;
    if (ignore_merges_) whole.emplace(raw, id);
  }
  for (const auto& [id, content] : added_content) {
    id_to_bytes_[id] = content;
    id_known_[id] = 1;
  }

  int32_t byte_id[256];
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    const uint32_t cp = gpt2_byte_to_unicode(static_cast<uint8_t>(b));
    if (cp < 0x80) ch = static_cast<char>(cp);
    else ch = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    auto it = token_id.find(ch);
    TRIPOD_CHECK_HINT(it != token_id.end(), "train byte-level BPE with the full byte alphabet",
                      "{}: model.vocab has no token for byte {} ('{}')", path, b, ch);
    byte_id[b] = it->second;
  }

  const json& merges = model["merges"];
  TRIPOD_CHECK(merges.is_array(), "{}: model.merges must be a list", path);
  std::vector<ByteBpe::Merge> list;
  list.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const json& m = merges[r];
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m;
      const size_t sp = s.find(' ');
      TRIPOD_CHECK(sp != std::string::npos, "{}: model.merges[{}] '{}' is not two tokens", path, r, s);
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else {
      TRIPOD_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                   "{}: model.merges[{}] is neither \"a b\" nor [\"a\", \"b\"]", path, r);
      a = m[0];
      b = m[1];
    }
    auto ia = token_id.find(a), ib = token_id.find(b), im = token_id.find(a + b);
    TRIPOD_CHECK(ia != token_id.end() && ib != token_id.end() && im != token_id.end(),
                 "{}: model.merges[{}] ('{}' '{}') uses or makes a token missing from model.vocab", path,
                 r, a, b);
    list.push_back({ia->second, ib->second, im->second});
  }
  bpe_ = std::make_unique<ByteBpe>(byte_id, list, /*keep_last_duplicate=*/true);
  if (ignore_merges_) bpe_->set_whole_piece_vocab(std::move(whole));

  // post_processor: special tokens around $A (Llama 3's <|begin_of_text|>)
  auto take_post = [&](const json& p) {
    const std::string t = type_of(p);
    if (t == "ByteLevel") return;
    if (t != "TemplateProcessing") refuse("post_processor (ByteLevel or TemplateProcessing)", p);
    bool seen_a = false;
    for (const json& item : p.value("single", json::array())) {
      if (item.contains("Sequence")) {
        if (item["Sequence"].value("id", "") != "A") refuse("post_processor template (only $A)", p);
        seen_a = true;
        continue;
      }
      const std::string name = item.value("SpecialToken", json::object()).value("id", "");
      const json& ids = p.value("special_tokens", json::object()).value(name, json::object()).value("ids", json());
      TRIPOD_CHECK(ids.is_array(), "{}: post_processor special token '{}' has no ids", path, name);
      for (const json& id : ids) {
        TRIPOD_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab_size(),
                     "{}: post_processor special token '{}' has id {} outside the vocabulary", path, name,
                     id.dump());
        (seen_a ? suffix_ids_ : prefix_ids_).push_back(id.get<int32_t>());
      }
    }
  };
  const json& post = root.value("post_processor", json());
  if (type_of(post) == "Sequence") {
    for (const json& p : post.value("processors", json::array())) take_post(p);
  } else if (!post.is_null()) {
    take_post(post);
  }

  // End of document: tokenizer_config.json's eos_token when the file sits
  // beside (what transformers, and so Megatron, use), else the first added
  // token of kEodNames.
  const std::filesystem::path config = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config)) {
    const json c = read_json(config.string());
    const json& eos = c.value("eos_token", json());
    const std::string name = eos.is_string() ? eos.get<std::string>()
                             : eos.is_object() ? eos.value("content", "") : "";
    if (!name.empty()) {
      eod_ = added_token_id(name);
      TRIPOD_CHECK(eod_ >= 0, "{}: eos_token '{}' is not an added token of {}", config.string(), name, path);
      eod_name_ = name + " (tokenizer_config.json)";
    }
  }
  for (const char* name : kEodNames) {
    if (eod_ >= 0) break;
    if (int32_t id = added_token_id(name); id >= 0) {
      eod_ = id;
      eod_name_ = name;
    }
  }
}

int32_t HuggingFaceTokenizer::eod() const {
  TRIPOD_CHECK_HINT(eod_ >= 0, "tripod takes the first added token of <|end_of_text|>, <|endoftext|>, </s>, <eos>",
                    "--tokenizer-model {} has no end-of-document token", path_);
  return eod_;
}

int32_t HuggingFaceTokenizer::added_token_id(std::string_view content) const {
  for (const AddedToken& a : added_)
    if (a.content == content) return a.id;
  return -1;
}

std::string HuggingFaceTokenizer::describe() const {
  return fmt::format("HuggingFaceTokenizer ({} ids, {} merges, {} pre-tokenizer{}{}, {} added tokens, "
                     "eod {} {}, from {})",
                     vocab_size(), bpe_->merge_count(), hf_pattern_name(pattern_), nfc_ ? ", NFC" : "",
                     ignore_merges_ ? ", ignore_merges" : "", added_.size(), eod_, eod_name_, path_);
}

// ---- encode / decode ----

void HuggingFaceTokenizer::encode(std::string_view text, std::vector<int32_t>* out) const {
  out->insert(out->end(), prefix_ids_.begin(), prefix_ids_.end());
  if (is_valid_utf8(text)) {
    encode_valid(text, out);
  } else {
    const std::string fixed = repair_utf8(text);
    encode_valid(fixed, out);
  }
  out->insert(out->end(), suffix_ids_.begin(), suffix_ids_.end());
}

void HuggingFaceTokenizer::encode_valid(std::string_view text, std::vector<int32_t>* out) const {
  if (raw_added_->empty()) return encode_segment(text, out);
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t done = 0;  // text[0, done) is encoded
  for (size_t i = raw_added_->next_candidate(s, n, 0); i < n; i = raw_added_->next_candidate(s, n, i)) {
    size_t len = 0;
    const int32_t k = raw_added_->match(s, n, i, &len);
    if (k < 0) {
      ++i;
      continue;
    }
    const AddedToken& a = added_[k];
    size_t start = i, stop = i + len;
    if (a.lstrip) {  // swallow white space to the left, back to the previous token
      while (start > done) {
        size_t p = start - 1;
        while (p > done && (s[p] & 0xC0) == 0x80) --p;
        int l;
        if (!whitespace_at(s, p, &l)) break;
        start = p;
      }
    }
    if (a.rstrip) {
      int l;
      while (stop < n && whitespace_at(s, stop, &l)) stop += static_cast<size_t>(l);
    }
    if (start > done) encode_segment(text.substr(done, start - done), out);
    out->push_back(a.id);
    done = i = stop;
  }
  if (done < n) encode_segment(text.substr(done), out);
}

void HuggingFaceTokenizer::encode_segment(std::string_view seg, std::vector<int32_t>* out) const {
  std::string normalized;
  if (nfc_ && nfc(seg, &normalized, path_)) seg = normalized;
  if (normalized_added_->empty()) return encode_pieces(seg, out);
  const auto* s = reinterpret_cast<const unsigned char*>(seg.data());
  size_t done = 0;
  const AddedTokens& t = *normalized_added_;
  for (size_t i = t.next_candidate(s, seg.size(), 0); i < seg.size(); i = t.next_candidate(s, seg.size(), i)) {
    size_t len = 0;
    const int32_t k = t.match(s, seg.size(), i, &len);
    if (k < 0) {
      ++i;
      continue;
    }
    if (i > done) encode_pieces(seg.substr(done, i - done), out);
    out->push_back(added_[k].id);
    done = i = i + len;
  }
  if (done < seg.size()) encode_pieces(seg.substr(done), out);
}

void HuggingFaceTokenizer::encode_pieces(std::string_view seg, std::vector<int32_t>* out) const {
  std::string spaced;
  if (add_prefix_space_ && !seg.empty() && seg[0] != ' ') {
    spaced = " " + std::string(seg);
    seg = spaced;
  }
  thread_local std::vector<int32_t> scratch;  // a piece of n bytes has <= n ids
  ByteBpe::Cache& cache = bpe_->thread_cache();
  const auto* s = reinterpret_cast<const unsigned char*>(seg.data());
  const size_t n = seg.size();
  if (scratch.size() < n + ByteBpe::kMaxCachedIds) scratch.resize(n + ByteBpe::kMaxCachedIds);
  int32_t* dst = scratch.data();
  const unicode::ClassTable ct = unicode::oniguruma_class_table();
  for (size_t i = 0; i < n;) {
    const size_t j = hf_piece_end(pattern_, s, n, i, ct);
    dst += bpe_->encode_piece(s + i, j - i, dst, cache);
    i = j;
  }
  out->insert(out->end(), scratch.data(), dst);
}

std::string HuggingFaceTokenizer::decode(std::span<const int32_t> ids) const {
  std::string s;
  for (int32_t id : ids) {
    TRIPOD_CHECK(id >= 0 && id < vocab_size() && id_known_[id], "token id {} names no token of {}", id,
                 path_);
    s += id_to_bytes_[id];
  }
  return s;
}

}  // namespace tripod::data
