// Sharded Hugging Face folders (`tripod convert`, interop/hf_weights.h), as
// save_pretrained writes every model above 5GB: model-0000i-of-0000N.safetensors
// plus model.safetensors.index.json. Through the real `tripod` executable:
//  - GPT-2, Llama (grouped-query attention), Mixtral and Qwen2-MoE, trained
//    one iteration: --export-hf with a tiny --max-shard-size writes several
//    shards; the index is checked byte by byte against the shards' own
//    headers, read here without tripod's reader (every tensor named once, in
//    the shard the weight_map says, total_size = the sum of the tensors'
//    byte ranges, no shard above the limit unless it holds one tensor), and
//    the shards hold, in order, exactly the tensors and bytes of the default
//    single-file export;
//  - the sharded folder imports to the same checkpoint as the single file,
//    every tensor bit for bit, and that import exports again to the same
//    model.safetensors bytes;
//  - refusals naming the file: a missing shard, a weight_map tensor absent
//    from its shard, a tensor in two shards, a shard the index does not name,
//    shards without the index, a .bin-only folder (with the command that
//    converts it), a malformed --max-shard-size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "ckpt/sharded_checkpoint.h"
#include "common.h"

namespace {

using namespace ckpt_test;
using namespace tripod;
using json = nlohmann::json;

const std::string kBase =
    "--num-layers 2 --hidden-size 64 --num-attention-heads 8 --seq-length 32 --mock-data --vocab-size 500 "
    "--micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --seed 5 --log-interval 1 --eval-interval 0 ";
const std::string kLlama = kBase +
                           "--group-query-attention --num-query-groups 2 --position-embedding-type rope "
                           "--normalization RMSNorm --norm-epsilon 1e-6 --swiglu "
                           "--untie-embeddings-and-output-weights --disable-bias-linear ";

// A safetensors header read straight from the bytes: name -> (begin, end).
std::map<std::string, std::pair<uint64_t, uint64_t>> header_of(const std::string& bytes, uint64_t* data_start) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(bytes.at(size_t(i)))) << (8 * i);
  const json h = json::parse(bytes.substr(8, n));
  std::map<std::string, std::pair<uint64_t, uint64_t>> out;
  for (auto it = h.begin(); it != h.end(); ++it)
    if (it.key() != "__metadata__")
      out[it.key()] = {it.value()["data_offsets"][0].get<uint64_t>(), it.value()["data_offsets"][1].get<uint64_t>()};
  *data_start = 8 + n;
  return out;
}

int run(const Scratch& s, const std::string& args) {
  return sh(env("TRIPOD_BIN") + " " + args + " > " + (s / "log").string() + " 2>&1");
}

std::string log_of(const Scratch& s) { return slurp(s / "log"); }

// Trains `flags` one iteration, exports it whole and in shards of at most
// `max_bytes`, checks the shards against the single file and the import of
// both against each other. Returns the number of shards.
size_t shard_round_trip(const Scratch& s, const std::string& flags, uint64_t max_bytes) {
  const fs::path ck = s / "ck", one = s / "one", many = s / "many";
  EXPECT_EQ(run(s, "train " + flags + " --train-iters 1 --save " + ck.string()), 0) << log_of(s);
  EXPECT_EQ(run(s, "convert --load " + ck.string() + " --export-hf " + one.string()), 0) << log_of(s);
  EXPECT_EQ(run(s, fmt::format("convert --load {} --export-hf {} --max-shard-size {}", ck.string(), many.string(),
                               max_bytes)), 0) << log_of(s);
  if (::testing::Test::HasFailure()) return 0;
  EXPECT_FALSE(fs::exists(one / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(many / "model.safetensors"));
  EXPECT_EQ(slurp(one / "config.json"), slurp(many / "config.json"));

  // The index against the shards' headers.
  const json index = json::parse(slurp(many / "model.safetensors.index.json"));
  const json& wm = index.at("weight_map");
  std::set<std::string> files;
  for (auto it = wm.begin(); it != wm.end(); ++it) files.insert(it.value().get<std::string>());
  const size_t N = files.size();
  EXPECT_GE(N, 3u);
  uint64_t total = 0, start = 0;
  std::set<std::string> seen;
  std::vector<std::string> order;  // tensor names in shard order
  std::map<std::string, std::string> bytes_of;
  for (size_t i = 1; i <= N; ++i) {
    const std::string f = fmt::format("model-{:05d}-of-{:05d}.safetensors", i, N);
    EXPECT_TRUE(files.count(f)) << f;
    const std::string bytes = slurp(many / f);
    const auto h = header_of(bytes, &start);
    uint64_t shard_bytes = 0;
    std::vector<std::pair<uint64_t, std::string>> by_offset;
    for (const auto& [name, range] : h) {
      EXPECT_TRUE(seen.insert(name).second) << name << " in two shards";
      EXPECT_EQ(wm.value(name, std::string()), f) << name;
      shard_bytes += range.second - range.first;
      by_offset.emplace_back(range.first, name);
      bytes_of[name] = bytes.substr(start + range.first, range.second - range.first);
    }
    std::sort(by_offset.begin(), by_offset.end());
    for (const auto& [_, name] : by_offset) order.push_back(name);
    EXPECT_EQ(start + shard_bytes, bytes.size()) << f;
    EXPECT_TRUE(shard_bytes <= max_bytes || h.size() == 1) << f << " holds " << shard_bytes << " bytes";
    total += shard_bytes;
  }
  EXPECT_EQ(seen.size(), wm.size());
  EXPECT_EQ(index.at("metadata").at("total_size").get<uint64_t>(), total);

  // The single file holds the same tensors, in the same order, with the same bytes.
  const std::string single = slurp(one / "model.safetensors");
  const auto h1 = header_of(single, &start);
  EXPECT_EQ(h1.size(), order.size());
  std::vector<std::pair<uint64_t, std::string>> by_offset;
  for (const auto& [name, range] : h1) {
    by_offset.emplace_back(range.first, name);
    EXPECT_EQ(single.substr(start + range.first, range.second - range.first), bytes_of[name]) << name;
  }
  std::sort(by_offset.begin(), by_offset.end());
  for (size_t i = 0; i < by_offset.size() && i < order.size(); ++i) EXPECT_EQ(by_offset[i].second, order[i]);
  EXPECT_EQ(start + total, single.size());

  // Both import to the same checkpoint; the sharded import exports the same file.
  EXPECT_EQ(run(s, "convert --import-hf " + one.string() + " --save " + (s / "ck_one").string()), 0) << log_of(s);
  EXPECT_EQ(run(s, "convert --import-hf " + many.string() + " --save " + (s / "ck_many").string()), 0) << log_of(s);
  if (::testing::Test::HasFailure()) return N;
  const auto a = ckpt::CheckpointReader::open((s / "ck_one").string());
  const auto b = ckpt::CheckpointReader::open((s / "ck_many").string());
  EXPECT_EQ(a.tensor_names(), b.tensor_names());
  for (const auto& n : a.tensor_names()) {
    const Tensor x = a.read_full(n), y = b.read_full(n);
    EXPECT_EQ(x.shape(), y.shape()) << n;
    if (x.shape() != y.shape()) continue;
    EXPECT_EQ(std::memcmp(x.raw(), y.raw(), x.nbytes()), 0) << n;
  }
  EXPECT_EQ(run(s, "convert --load " + (s / "ck_many").string() + " --export-hf " + (s / "again").string()), 0)
      << log_of(s);
  EXPECT_EQ(slurp(s / "again" / "model.safetensors"), single);
  return N;
}

TEST(HfShards, Gpt2) {
  Scratch s("hf_shards_gpt2");
  EXPECT_GE(shard_round_trip(s, kBase, 40'000), 3u);
  if (!HasFailure()) fs::remove_all(s.dir);
}

TEST(HfShards, Llama) {
  Scratch s("hf_shards_llama");
  // "40KB" in transformers' syntax: 40,000 bytes.
  EXPECT_GE(shard_round_trip(s, kLlama + "--ffn-hidden-size 96", 40'000), 3u);
  if (!HasFailure()) fs::remove_all(s.dir);
}

TEST(HfShards, MixtralAndQwen2Moe) {
  Scratch s("hf_shards_moe");
  EXPECT_GE(shard_round_trip(s, kLlama + "--ffn-hidden-size 48 --num-experts 4 --moe-router-topk 2 "
                                         "--moe-ffn-hidden-size 48", 30'000), 3u);
  if (HasFailure()) return;
  Scratch q("hf_shards_qwen2_moe");
  EXPECT_GE(shard_round_trip(q, kLlama + "--ffn-hidden-size 96 --num-experts 4 --moe-router-topk 2 "
                                         "--moe-ffn-hidden-size 48 --moe-router-pre-softmax "
                                         "--moe-shared-expert-intermediate-size 40 --moe-shared-expert-gate "
                                         "--moe-layer-freq [0,1]", 30'000), 3u);
  if (!HasFailure()) fs::remove_all(s.dir), fs::remove_all(q.dir);
}

// Each broken copy of a good sharded folder is refused, naming the file.
TEST(HfShards, Refusals) {
  Scratch s("hf_shards_refusals");
  const fs::path ck = s / "ck", good = s / "good";
  ASSERT_EQ(run(s, "train " + kLlama + "--ffn-hidden-size 96 --train-iters 1 --save " + ck.string()), 0) << log_of(s);
  ASSERT_EQ(run(s, "convert --load " + ck.string() + " --export-hf " + good.string() + " --max-shard-size 40KB"), 0)
      << log_of(s);
  const json index = json::parse(slurp(good / "model.safetensors.index.json"));
  const size_t N = [&] {
    std::set<std::string> f;
    for (const auto& v : index["weight_map"]) f.insert(v.get<std::string>());
    return f.size();
  }();
  ASSERT_GE(N, 3u);
  const std::string second = fmt::format("model-00002-of-{:05d}.safetensors", N);
  int k = 0;
  // A copy of the good folder, broken by `edit`; the import must fail with every string of `expect` in its log.
  auto refused = [&](const std::function<void(const fs::path&)>& edit, const std::vector<std::string>& expect) {
    const fs::path dir = s / fmt::format("bad{}", k++);
    fs::copy(good, dir);
    edit(dir);
    EXPECT_NE(run(s, "convert --import-hf " + dir.string() + " --save " + (dir.string() + "_ck")), 0) << dir;
    for (const auto& e : expect) EXPECT_NE(log_of(s).find(e), std::string::npos) << e << "\n" << log_of(s);
  };
  // The good folder imports.
  ASSERT_EQ(run(s, "convert --import-hf " + good.string() + " --save " + (s / "good_ck").string()), 0) << log_of(s);
  // A missing shard.
  refused([&](const fs::path& d) { fs::remove(d / second); }, {(s / "bad0" / second).string(), "is missing"});
  // A tensor of the weight_map absent from its shard.
  refused(
      [&](const fs::path& d) {
        json j = index;
        j["weight_map"]["model.layers.0.self_attn.extra.weight"] = second;
        std::ofstream(d / "model.safetensors.index.json") << j.dump(2);
      },
      {second, "has no tensor 'model.layers.0.self_attn.extra.weight'"});
  // A tensor in two shards: the second shard written again with one of the first's.
  refused(
      [&](const fs::path& d) {
        const auto first = ckpt::SafetensorsFile::open((d / fmt::format("model-00001-of-{:05d}.safetensors", N)).string());
        const auto two = ckpt::SafetensorsFile::open((d / second).string());
        std::vector<std::pair<std::string, Tensor>> t;
        for (const auto& e : two.entries()) t.emplace_back(e.name, two.read(e.name));
        t.emplace_back(first.entries()[0].name, first.read(first.entries()[0].name));
        ckpt::write_safetensors((d / second).string(), t, {{"format", "pt"}}, false);
      },
      {"is in two shards", second});
  // A shard the index does not name.
  refused([&](const fs::path& d) { fs::copy(d / second, d / "model-00009-of-00009.safetensors"); },
          {"model-00009-of-00009.safetensors is a shard that", "model.safetensors.index.json does not name"});
  // Shards without their index.
  refused([&](const fs::path& d) { fs::remove(d / "model.safetensors.index.json"); },
          {"is a shard but", "model.safetensors.index.json is missing"});
  // Both a single file and an index.
  refused([&](const fs::path& d) { fs::copy(d / second, d / "model.safetensors"); }, {"ambiguous"});
  // PyTorch pickles only: the message says how to convert.
  refused(
      [&](const fs::path& d) {
        std::vector<fs::path> weights;
        for (const auto& e : fs::directory_iterator(d))
          if (e.path().filename() != "config.json") weights.push_back(e.path());
        for (const auto& w : weights) fs::remove(w);
        std::ofstream(d / "pytorch_model.bin") << "not read";
      },
      {"pytorch_model.bin", "save_pretrained"});
  // A size transformers would not read.
  EXPECT_NE(run(s, "convert --load " + ck.string() + " --export-hf " + (s / "x").string() + " --max-shard-size 5XB"), 0);
  EXPECT_NE(log_of(s).find("--max-shard-size '5XB' is not a size"), std::string::npos) << log_of(s);
  EXPECT_FALSE(fs::exists(s / "x"));
  if (!HasFailure()) fs::remove_all(s.dir);
}

}  // namespace
