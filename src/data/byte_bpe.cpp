// Implementation of data/byte_bpe.h: the id-pair merge table (open
// addressing, sized from the merge count), the BPE loops (short pieces:
// array scan; long pieces: heap, O(n log n)) and the bounded per-thread
// piece cache. Reference: OpenAI gpt-2 src/encoder.py (bpe).
#include "data/byte_bpe.h"

#include <atomic>
#include <climits>
#include <cstring>
#include <queue>

namespace tripod::data {

namespace {
std::atomic<uint64_t> g_instances{1};
}  // namespace

// ---- merge table: (id a, id b) -> (rank, merged id) ----

struct ByteBpe::MergeTable {
  struct Entry {
    uint64_t key = ~0ull;
    int32_t rank = INT32_MAX, id = -1;
  };
  int bits;
  std::vector<Entry> entries;

  explicit MergeTable(size_t count) {
    bits = 10;
    while ((size_t{1} << bits) < 2 * count + 16) ++bits;  // load factor <= 1/2
    entries.resize(size_t{1} << bits);
  }
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t slot(uint64_t k) const { return (k * 0x9e3779b97f4a7c15ull) >> (64 - bits); }
  void insert(int32_t a, int32_t b, int32_t rank, int32_t id, bool keep_last) {
    const uint64_t k = key(a, b);
    for (size_t i = slot(k);; i = (i + 1) & (entries.size() - 1)) {
      if (entries[i].key == k) {
        if (keep_last) entries[i] = {k, rank, id};
        return;
      }
      if (entries[i].key == ~0ull) {
        entries[i] = {k, rank, id};
        return;
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

// Keys are stored zero-padded to 24 bytes and compared as three words.
struct ByteBpe::Cache {
  static constexpr int kSlotBits = 15;
  struct Slot {
    uint64_t key[3];
    uint8_t len;  // 0: empty
    uint8_t nids;
    uint16_t pad;
    int32_t ids[kMaxCachedIds];
  };
  static_assert(sizeof(Slot) == 64);
  std::vector<Slot> slots;
  uint64_t owner = 0;
};

ByteBpe::ByteBpe(const int32_t byte_id[256], const std::vector<Merge>& merges, bool keep_last_duplicate)
    : merge_count_(static_cast<int64_t>(merges.size())),
      merges_(std::make_unique<MergeTable>(merges.size())),
      instance_(g_instances++) {
  std::memcpy(byte_id_, byte_id, sizeof(byte_id_));
  int32_t rank = 0;
  for (const Merge& m : merges) merges_->insert(m.a, m.b, rank++, m.id, keep_last_duplicate);
}

ByteBpe::~ByteBpe() = default;

void ByteBpe::set_whole_piece_vocab(Vocab vocab) { whole_ = std::move(vocab); }

const int32_t* ByteBpe::whole_piece(const unsigned char* p, size_t n) const {
  if (whole_.empty()) return nullptr;
  auto it = whole_.find(std::string_view(reinterpret_cast<const char*>(p), n));
  return it == whole_.end() ? nullptr : &it->second;
}

// ---- BPE ----

void ByteBpe::bpe(std::string_view piece, std::vector<int32_t>* out) const {
  const auto* p = reinterpret_cast<const unsigned char*>(piece.data());
  if (piece.empty()) return;
  if (const int32_t* id = whole_piece(p, piece.size())) {
    out->push_back(*id);
  } else if (piece.size() <= 64) {
    int32_t ids[64];
    const size_t m = bpe_short(p, piece.size(), ids);
    out->insert(out->end(), ids, ids + m);
  } else {
    bpe_long(p, piece.size(), out);
  }
}

size_t ByteBpe::bpe_short(const unsigned char* p, size_t n, int32_t* ids) const {
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

void ByteBpe::bpe_long(const unsigned char* p, size_t n, std::vector<int32_t>* out) const {
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

// ---- cached piece encoding ----

ByteBpe::Cache& ByteBpe::thread_cache() const {
  thread_local Cache cache;
  if (cache.owner != instance_) {
    cache.slots.assign(size_t{1} << Cache::kSlotBits, Cache::Slot{});
    cache.owner = instance_;
  }
  return cache;
}

size_t ByteBpe::encode_piece(const unsigned char* p, size_t len, int32_t* dst, Cache& cache) const {
  if (len == 1) {
    *dst = byte_id_[p[0]];
    return 1;
  }
  if (len <= kMaxCachedKey) {
    uint64_t w[3] = {0, 0, 0};
    std::memcpy(w, p, len);
    uint64_t h = (w[0] * 0x9e3779b97f4a7c15ull) ^ (w[1] * 0xc2b2ae3d27d4eb4full) ^
                 (w[2] * 0x165667b19e3779f9ull) ^ len;
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    Cache::Slot& slot = cache.slots[h >> (64 - Cache::kSlotBits)];
    if (slot.len == len && slot.key[0] == w[0] && slot.key[1] == w[1] && slot.key[2] == w[2]) {
      // Copy all kMaxCachedIds slots (fixed size, no branch); dst has room.
      std::memcpy(dst, slot.ids, sizeof(slot.ids));
      return slot.nids;
    }
    size_t m;
    if (const int32_t* id = whole_piece(p, len)) {
      *dst = *id;
      m = 1;
    } else {
      m = bpe_short(p, len, dst);
    }
    if (m <= kMaxCachedIds) {
      std::memcpy(slot.key, w, sizeof(w));
      slot.len = static_cast<uint8_t>(len);
      slot.nids = static_cast<uint8_t>(m);
      std::memcpy(slot.ids, dst, m * sizeof(int32_t));
    }
    return m;
  }
  if (const int32_t* id = whole_piece(p, len)) {
    *dst = *id;
    return 1;
  }
  if (len <= 64) return bpe_short(p, len, dst);
  std::vector<int32_t> ids;
  bpe_long(p, len, &ids);
  std::memcpy(dst, ids.data(), ids.size() * sizeof(int32_t));
  return ids.size();
}

}  // namespace tripod::data
