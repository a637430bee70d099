// Two-stage lookup table for data/unicode_class.h, built once from the
// generated ranges: stage 1 maps a 256-code-point block to a stage-2 block of
// classes; most of the 4352 blocks are identical (all "other", all letters)
// and share storage, so the table is ~100 KB instead of 1.1 MB.
#include "data/unicode_class.h"

#include <map>
#include <string>
#include <vector>

namespace tripod::data::unicode {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int kBlocks = (kMaxCodePoint + 1) / 256;

struct Table {
  std::vector<uint16_t> stage1;  // (kBlocks,) block -> stage-2 block number
  std::vector<uint8_t> stage2;   // (num distinct blocks * 256,)

  explicit Table(bool oniguruma) {
    std::vector<uint8_t> flat(kMaxCodePoint + 1, static_cast<uint8_t>(CharClass::kOther));
    auto fill = [&](const CodePointRange* r, int n, CharClass c) {
      for (int i = 0; i < n; ++i)
        for (uint32_t cp = r[i].first; cp <= r[i].last; ++cp) flat[cp] = static_cast<uint8_t>(c);
    };
    fill(kLetterRanges, kLetterRangeCount, CharClass::kLetter);
    fill(kNumberRanges, kNumberRangeCount, CharClass::kNumber);
    fill(kSpaceRanges, kSpaceRangeCount, CharClass::kSpace);
    if (oniguruma) {
      flat[0x85] = static_cast<uint8_t>(CharClass::kSpace);
      flat[0xFEFF] = static_cast<uint8_t>(CharClass::kOther);
    }
    std::map<std::string, uint16_t> seen;
    stage1.resize(kBlocks);
    for (int b = 0; b < kBlocks; ++b) {
      std::string key(reinterpret_cast<const char*>(flat.data()) + 256 * b, 256);
      auto [it, fresh] = seen.emplace(key, static_cast<uint16_t>(seen.size()));
      if (fresh) stage2.insert(stage2.end(), key.begin(), key.end());
      stage1[b] = it->second;
    }
  }
};

const Table& table() {
  static const Table t(false);
  return t;
}

const Table& oniguruma_table() {
  static const Table t(true);
  return t;
}

}  // namespace

CharClass classify(uint32_t cp) {
  if (cp > kMaxCodePoint) return CharClass::kOther;
  const Table& t = table();
  return static_cast<CharClass>(t.stage2[(static_cast<size_t>(t.stage1[cp >> 8]) << 8) | (cp & 255)]);
}

ClassTable class_table() {
  const Table& t = table();
  return {t.stage1.data(), t.stage2.data()};
}

ClassTable oniguruma_class_table() {
  const Table& t = oniguruma_table();
  return {t.stage1.data(), t.stage2.data()};
}

}  // namespace tripod::data::unicode
