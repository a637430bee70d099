// Implementation of data/gpt2_bpe.h: loading encoder.json / vocab.bpe, the
// id-pair merge table, the BPE loops (short pieces: array scan; long pieces:
// heap, O(n log n)) and the bounded per-thread piece cache.
// Reference: OpenAI gpt-2 src/encoder.py (bytes_to_unicode, bpe, encode).
#include "data/gpt2_bpe.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <climits>
#include <cstring>
#include <fstream>
#include <queue>
#include <sstream>
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

namespace {

// Raw bytes of a vocab/merges token written in GPT-2's unicode alphabet.
bool token_bytes(const std::string& s, const std::unordered_map<uint32_t, uint8_t>& decoder,
                 std::string* out) {
  out->clear();
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  if (!is_valid_utf8(s)) return false;
  for (size_t i = 0; i < s.size();) {
    int len;
    const uint32_t cp = decode_utf8(p + i, &len);
    auto it = decoder.find(cp);
    if (it == decoder.end()) return false;
    out->push_back(static_cast<char>(it->second));
    i += static_cast<size_t>(len);
  }
  return true;
}

std::atomic<uint64_t> g_instances{1};


// Bounded direct-mapped cache: piece bytes (<= 24) -> ids (<= 9). A new
// piece evicts whatever shared its slot, so memory is fixed (2 MiB/thread).
// Keys are stored zero-padded to 24 bytes and compared as three words.
struct PieceCache {
  static constexpr int kSlotBits = 15;
  static constexpr size_t kMaxKey = 24, kMaxIds = 9;
  struct Slot {
    uint64_t key[3];
    uint8_t len;  // 0: empty
    uint8_t nids;
    uint16_t pad;
    int32_t ids[kMaxIds];
  };
  static_assert(sizeof(Slot) == 64);
  std::vector<Slot> slots;
  uint64_t owner = 0;
};

}  // namespace

// ---- merge table: (id a, id b) -> (rank, merged id), open addressing ----

struct GPT2BPETokenizer::MergeTable {
  static constexpr int kBits = 17;
  struct Entry {
    uint64_t key = ~0ull;
    int32_t rank = INT32_MAX, id = -1;
  };
  std::vector<Entry> entries = std::vector<Entry>(size_t{1} << kBits);

  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t slot(uint64_t k) const { return (k * 0x9e3779b97f4a7c15ull) >> (64 - kBits); }
  bool insert(int32_t a, int32_t b, int32_t rank, int32_t id) {
    const uint64_t k = key(a, b);
    for (size_t i = slot(k);; i = (i + 1) & (entries.size() - 1)) {
      if (entries[i].key == k) return false;  // keep the first (lowest) rank
      if (entries[i].key == ~0ull) {
        entries[i] = {k, rank, id};
        return true;
      }
    }
  }
  const Entry* find(int32_t a, int32_t b) const {
    const uint64_t k = key(a, b);
    for (size_t i = slot(k);; i = (i + 1) & (entries.size() - 1)) {
      if (entries[i].key == k) return &entries[i];
      if (entries[i].key == ~0ull) return nullptr;
    }
  }
  int32_t rank(int32_t a, int32_t b) const {
    const Entry* e = find(a, b);
    return e ? e->rank : INT32_MAX;
  }
};

// ---- loading ----

GPT2BPETokenizer::GPT2BPETokenizer(const std::string& vocab_file, const std::string& merge_file)
    : vocab_file_(vocab_file), merges_(std::make_unique<MergeTable>()), instance_(g_instances++) {
  const char* hint = "fetch GPT-2's files with scripts/get_gpt2_vocab.sh and pass "
                     "--vocab-file .../encoder.json --merge-file .../vocab.bpe";
  std::unordered_map<uint32_t, uint8_t> decoder;
  for (int b = 0; b < 256; ++b) decoder[gpt2_byte_to_unicode(static_cast<uint8_t>(b))] = static_cast<uint8_t>(b);

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
    TRIPOD_CHECK_HINT(token_bytes(tok, decoder, &raw), hint,
                      "{}: token '{}' is not in GPT-2's byte alphabet", vocab_file, tok);
    id_to_bytes_[id] = raw;
    bytes_to_id.emplace(raw, static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    auto it = bytes_to_id.find(std::string(1, static_cast<char>(b)));
    TRIPOD_CHECK(it != bytes_to_id.end(), "{}: no token for byte {}", vocab_file, b);
    byte_id_[b] = it->second;
  }
  auto eod = bytes_to_id.find("<|endoftext|>");
  TRIPOD_CHECK_HINT(eod != bytes_to_id.end(), hint, "{} has no <|endoftext|> token", vocab_file);
  eod_ = eod->second;

  std::ifstream mf(merge_file);
  TRIPOD_CHECK_HINT(mf.good(), hint, "cannot open --merge-file {}", merge_file);
  std::string line, a, b;
  int32_t rank = 0;
  for (int64_t lineno = 1; std::getline(mf, line); ++lineno) {
    if ((lineno == 1 && line.rfind("#version", 0) == 0) || line.empty()) continue;
    const size_t sp = line.find(' ');
    TRIPOD_CHECK_HINT(sp != std::string::npos && line.find(' ', sp + 1) == std::string::npos, hint,
                      "{}:{}: a merge line is two tokens separated by one space", merge_file, lineno);
    const bool ok = token_bytes(line.substr(0, sp), decoder, &a) &&
                    token_bytes(line.substr(sp + 1), decoder, &b);
    auto ia = bytes_to_id.find(a), ib = bytes_to_id.find(b), im = bytes_to_id.find(a + b);
    TRIPOD_CHECK_HINT(ok && ia != bytes_to_id.end() && ib != bytes_to_id.end() &&
                          im != bytes_to_id.end(),
                      "use the merges file that belongs to --vocab-file",
                      "{}:{}: merge '{}' uses or makes a token missing from {}", merge_file,
                      lineno, line, vocab_file);
    merges_->insert(ia->second, ib->second, rank++, im->second);
  }
  TRIPOD_CHECK_HINT(rank > 0, hint, "--merge-file {} has no merges", merge_file);
}

GPT2BPETokenizer::~GPT2BPETokenizer() = default;

std::string GPT2BPETokenizer::describe() const {
  return fmt::format("GPT2BPETokenizer ({} tokens, eod {}, from {})", vocab_size(), eod_,
                     vocab_file_);
}

// ---- BPE ----

void GPT2BPETokenizer::bpe(std::string_view piece, std::vector<int32_t>* out) const {
  const auto* p = reinterpret_cast<const unsigned char*>(piece.data());
  if (piece.size() <= 64) {
    int32_t ids[64];
    const size_t m = bpe_short(p, piece.size(), ids);
    out->insert(out->end(), ids, ids + m);
  } else {
    bpe_long(p, piece.size(), out);
  }
}

size_t GPT2BPETokenizer::bpe_short(const unsigned char* p, size_t n, int32_t* ids) const {
  int32_t ranks[64];  // ranks[i]: rank of the pair (ids[i], ids[i+1])
  size_t m = n;
  for (size_t i = 0; i < n; ++i) ids[i] = byte_id_[p[i]];
  for (size_t i = 0; i + 1 < m; ++i) ranks[i] = merges_->rank(ids[i], ids[i + 1]);
  while (m > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < m; ++i)
      if (ranks[i] < ranks[best]) best = i;
    if (ranks[best] == INT32_MAX) break;
    ids[best] = merges_->find(ids[best], ids[best + 1])->id;
    std::memmove(ids + best + 1, ids + best + 2, (m - best - 2) * sizeof(int32_t));
    std::memmove(ranks + best, ranks + best + 1, (m - best - 2) * sizeof(int32_t));
    --m;
    if (best > 0) ranks[best - 1] = merges_->rank(ids[best - 1], ids[best]);
    if (best + 1 < m) ranks[best] = merges_->rank(ids[best], ids[best + 1]);
  }
  return m;
}

void GPT2BPETokenizer::bpe_long(const unsigned char* p, size_t n, std::vector<int32_t>* out) const {
  // Symbols form a linked list over byte positions; candidate merges wait in
  // a min-heap on (rank, position) and are dropped when stale on pop.
  struct Candidate {
    int32_t rank, pos, right, lid, rid;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const auto N = static_cast<int32_t>(n);
  std::vector<int32_t> ids(n), prev(n), next(n);
  std::vector<char> alive(n, 1);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t i, int32_t j) {
    if (i < 0 || j >= N) return;
    if (const MergeTable::Entry* e = merges_->find(ids[i], ids[j]))
      heap.push({e->rank, i, j, ids[i], ids[j]});
  };
  for (int32_t i = 0; i < N; ++i) {
    ids[i] = byte_id_[p[i]];
    prev[i] = i - 1;
    next[i] = i + 1;
  }
  for (int32_t i = 0; i + 1 < N; ++i) push(i, i + 1);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (!alive[c.pos] || !alive[c.right] || next[c.pos] != c.right || ids[c.pos] != c.lid ||
        ids[c.right] != c.rid)
      continue;
    ids[c.pos] = merges_->find(c.lid, c.rid)->id;
    alive[c.right] = 0;
    next[c.pos] = next[c.right];
    if (next[c.pos] < N) prev[next[c.pos]] = c.pos;
    push(prev[c.pos], c.pos);
    push(c.pos, next[c.pos]);
  }
  for (int32_t i = 0; i < N; i = next[i]) out->push_back(ids[i]);
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
  thread_local PieceCache cache;
  thread_local std::vector<int32_t> scratch;  // ids of this call; a piece of n bytes has <= n ids
  if (cache.owner != instance_) {
    cache.slots.assign(size_t{1} << PieceCache::kSlotBits, PieceCache::Slot{});
    cache.owner = instance_;
  }
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  if (scratch.size() < n + PieceCache::kMaxIds) scratch.resize(n + PieceCache::kMaxIds);
  int32_t* dst = scratch.data();
  const unicode::ClassTable ct = unicode::class_table();
  for (size_t i = 0; i < n;) {
    const size_t j = gpt2_piece_end(s, n, i, ct);
    const size_t len = j - i;
    if (len == 1) {
      *dst++ = byte_id_[s[i]];
    } else if (len <= PieceCache::kMaxKey) {
      uint64_t w[3] = {0, 0, 0};
      std::memcpy(w, s + i, len);
      uint64_t h = (w[0] * 0x9e3779b97f4a7c15ull) ^ (w[1] * 0xc2b2ae3d27d4eb4full) ^
                   (w[2] * 0x165667b19e3779f9ull) ^ len;
      h ^= h >> 31;
      h *= 0xbf58476d1ce4e5b9ull;
      PieceCache::Slot& slot = cache.slots[h >> (64 - PieceCache::kSlotBits)];
      if (slot.len == len && slot.key[0] == w[0] && slot.key[1] == w[1] && slot.key[2] == w[2]) {
        // Copy all kMaxIds slots (fixed size, no branch); the scratch has room.
        std::memcpy(dst, slot.ids, sizeof(slot.ids));
        dst += slot.nids;
      } else {
        const size_t m = bpe_short(s + i, len, dst);
        if (m <= PieceCache::kMaxIds) {
          std::memcpy(slot.key, w, sizeof(w));
          slot.len = static_cast<uint8_t>(len);
          slot.nids = static_cast<uint8_t>(m);
          std::memcpy(slot.ids, dst, m * sizeof(int32_t));
        }
        dst += m;
      }
    } else if (len <= 64) {
      dst += bpe_short(s + i, len, dst);
    } else {
      std::vector<int32_t> ids;
      bpe_long(s + i, len, &ids);
      std::memcpy(dst, ids.data(), ids.size() * sizeof(int32_t));
      dst += ids.size();
    }
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
