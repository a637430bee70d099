// Seed corpora of the fuzz targets (fuzz_common.h write_seeds), made by the
// real writers where tripod has one: IndexedDatasetWriter, write_safetensors,
// the checkpoint save path, and the Megatron fixture of tests/ckpt/fixtures
// (a real torch.save file and .bin/.idx pair). Files named "valid-*" must be
// accepted by their reader; the others are near misses (truncated, wrong
// token, bad merge) that must be rejected cleanly.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ckpt/safetensors.h"
#include "data/hf_pretokenizer.h"
#include "data/indexed_dataset.h"
#include "interop/torch_pickle.h"
#include "fuzz_ckpt_fixture.h"
#include "fuzz_common.h"

namespace tripod::fuzz {

namespace fs = std::filesystem;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A string literal with its NUL bytes (pickles are binary).
template <size_t N>
std::string lit(const char (&s)[N]) {
  return std::string(s, N - 1);
}

std::string fixture(const std::string& source_dir, const std::string& name) {
  return source_dir + "/tests/ckpt/fixtures/megatron_gpt_tiny/" + name;
}

void idx_seeds(const std::string& dir, const std::string& source_dir) {
  const std::string prefix = scratch_dir() + "/seed-ds";
  auto pair = [&](const std::vector<std::vector<int32_t>>& docs, data::TokenDType dtype) {
    data::IndexedDatasetWriter w(prefix, dtype);
    for (const auto& d : docs) w.add_document(d.data(), int64_t(d.size()));
    w.finish();
    return join2(read_all(data::idx_path(prefix)), read_all(data::bin_path(prefix)));
  };
  write_file(dir + "/valid-uint16", pair({{1, 2, 3}, {4, 5}, {6}, {50256}}, data::TokenDType::kUInt16));
  write_file(dir + "/valid-int32", pair({{70000, 1}, {2}, {3, 4, 5, 6}}, data::TokenDType::kInt32));
  write_file(dir + "/valid-uint8", pair({{255, 0}, {7}}, data::TokenDType::kUInt8));
  const std::string s = pair({{1, 2, 3}, {4, 5}}, data::TokenDType::kUInt16);
  write_file(dir + "/bad-bin-truncated", s.substr(0, s.size() - 2));
  write_file(dir + "/bad-bin-longer", s + std::string(2, '\0'));
  const std::string fx = fixture(source_dir, "docs_text_document");
  if (fs::exists(fx + ".idx"))
    write_file(dir + "/valid-megatron-fixture", join2(read_all(fx + ".idx"), read_all(fx + ".bin")));
}

void safetensors_seeds(const std::string& dir) {
  const std::string path = scratch_dir() + "/seed.safetensors";
  auto filled = [](const Shape& shape, DType dt) {
    Tensor t = Tensor::zeros(shape, dt);
    auto* b = static_cast<uint8_t*>(t.raw());
    for (size_t i = 0; i < t.nbytes(); ++i) b[i] = uint8_t(i * 7 + 1);
    return t;
  };
  ckpt::write_safetensors(path, {{"w", filled({2, 3}, DType::F32)}, {"b", filled({3}, DType::F32)}},
                    {{"format", "pt"}});
  write_file(dir + "/valid-f32-crc", read_all(path));
  ckpt::write_safetensors(path, {{"h", filled({4}, DType::BF16)}, {"g", filled({2, 2}, DType::F16)},
                           {"d", filled({1}, DType::F64)}, {"i", filled({2}, DType::I64)}},
                    {}, /*with_checksums=*/false);
  write_file(dir + "/valid-mixed-nocrc", read_all(path));
  ckpt::write_safetensors(path, {}, {{"only", "metadata"}});
  write_file(dir + "/valid-empty", read_all(path));
  const std::string s = read_all(dir + "/valid-f32-crc");
  write_file(dir + "/bad-truncated", s.substr(0, s.size() - 3));
}

void ckpt_metadata_seeds(const std::string& dir) {
  const std::string ck = make_checkpoint_fixture(scratch_dir() + "/seed-ckpt");
  write_file(dir + "/valid-metadata", read_all(ck + "/iter_0000001/metadata.json"));
}

void gpt2_bpe_seeds(const std::string& dir) {
  write_file(dir + "/valid-tiny", join2(tiny_gpt2_vocab(), tiny_gpt2_merges()));
  write_file(dir + "/bad-merge", join2(tiny_gpt2_vocab(), tiny_gpt2_merges() + "x \xc4\xa0zz\n"));
  write_file(dir + "/bad-vocab-no-eod", join2("{\"a\": 0}", tiny_gpt2_merges()));
}

// tokenizer.json files of the tiny vocabulary: GPT-2's layout (ByteLevel
// with its own pattern), and Llama 3's (Split with its pattern, then
// ByteLevel; a TemplateProcessing prefix; added tokens, one lstrip).
void hf_tokenizer_seeds(const std::string& dir) {
  const nlohmann::json vocab = nlohmann::json::parse(tiny_gpt2_vocab());
  nlohmann::json merges = nlohmann::json::array(), pair_merges = nlohmann::json::array();
  std::istringstream in(tiny_gpt2_merges());
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    merges.push_back(line);
    pair_merges.push_back({line.substr(0, line.find(' ')), line.substr(line.find(' ') + 1)});
  }
  const int eod = static_cast<int>(vocab.size()) - 1;
  auto added = [](int id, const char* s, bool lstrip) {
    return nlohmann::json{{"id", id}, {"content", s}, {"single_word", false}, {"lstrip", lstrip},
                          {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  nlohmann::json gpt2{{"normalizer", nullptr},
                      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                      {"post_processor", {{"type", "ByteLevel"}, {"trim_offsets", false}}},
                      {"decoder", {{"type", "ByteLevel"}}},
                      {"added_tokens", {added(eod, "<|endoftext|>", false)}},
                      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  write_file(dir + "/valid-gpt2-layout.json", gpt2.dump());
  nlohmann::json v = vocab;
  v["<|begin_of_text|>"] = eod + 1;
  v["<mask>"] = eod + 2;
  nlohmann::json llama{
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", std::string(data::hf_pattern_regex(data::HfPattern::kLlama3))}}},
           {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {eod + 1}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", {added(eod, "<|endoftext|>", false), added(eod + 1, "<|begin_of_text|>", false),
                        added(eod + 2, "<mask>", true)}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"ignore_merges", true}, {"vocab", v}, {"merges", pair_merges}}}};
  write_file(dir + "/valid-llama3-layout.json", llama.dump());
  nlohmann::json bad = gpt2;
  bad["model"]["merges"].push_back("x zz");
  write_file(dir + "/bad-merge.json", bad.dump());
}

// The jsonl target picks the format from the input size (fuzz_jsonl.cpp):
// size % 4 in {0, 1}: jsonl, 2: text, 3: text-paragraphs.
std::string sized(std::string s, size_t mod4, char pad) {
  const size_t nl = s.size() && s.back() == '\n' ? 1 : 0;
  std::string body = s.substr(0, s.size() - nl);
  while ((body.size() + nl) % 4 != mod4) body += pad;
  return body + (nl ? "\n" : "");
}

void jsonl_seeds(const std::string& dir) {
  const std::string jsonl =
      "{\"text\": \"the quick brown fox\", \"title\": \"a\"}\n"
      "{\"text\": \"and then \\u00e9t\\u00e9 \\ud83e\\udd16 \\n in the end\", \"title\": \"b\", \"id\": 3}\n"
      "{\"title\": \"c\", \"text\": \"\"}\n";
  write_file(dir + "/valid-jsonl", sized(jsonl, 0, ' '));
  write_file(dir + "/valid-jsonl-skip", sized(jsonl + "{\"text\": 5}\nnot json\n", 5 % 4, ' '));
  write_file(dir + "/valid-text", sized("one line\nanother line\n\nthird\n", 2, 'x'));
  write_file(dir + "/valid-paragraphs", sized("para one\nstill one\n\npara two\n", 3, 'x'));
  write_file(dir + "/bad-jsonl", sized("{\"text\": \"ok\"}\n{\"text\": \n", 0, ' '));
}

void pickle_seeds(const std::string& dir, const std::string& source_dir) {
  // {"text": "hi", "n": 7, "l": ([1, 2], (True, None))}, protocol 2.
  const std::string small = lit(
      "\x80\x02}q\x00(X\x04\x00\x00\x00textq\x01X\x02\x00\x00\x00hiq\x02X\x01\x00\x00\x00nq\x03K\x07"
      "X\x01\x00\x00\x00lq\x04]q\x05(K\x01K\x02" "e\x88N\x86q\x06\x86q\x07u.");
  write_file(dir + "/valid-small", small);
  write_file(dir + "/bad-os-system", lit("\x80\x02" "cos\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85q\x02R."));
  const std::string pt = fixture(source_dir, "ckpt/iter_0000020/mp_rank_00/model_optim_rng.pt");
  if (fs::exists(pt)) {
    interop::ZipArchive zip(pt);
    for (const auto& n : zip.names())
      if (n.size() >= 8 && n.compare(n.size() - 8, 8, "data.pkl") == 0) {
        const auto e = zip.entry(n);
        write_file(dir + "/valid-megatron-data.pkl", e.data, e.size);
      }
  }
}

// A zip archive of stored entries, laid out as torch.save lays it out (local
// headers, central directory, end record), for a seed far smaller than the
// fixture.
std::string stored_zip(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out, cd;
  auto le = [](std::string& s, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) s += char((v >> (8 * i)) & 0xff);
  };
  for (const auto& [name, data] : entries) {
    const uint32_t crc = ckpt::crc32(data.data(), data.size());
    const uint64_t offset = out.size();
    le(out, 0x04034b50, 4); le(out, 20, 2); le(out, 0, 2); le(out, 0, 2); le(out, 0, 4);
    le(out, crc, 4); le(out, data.size(), 4); le(out, data.size(), 4); le(out, name.size(), 2); le(out, 0, 2);
    out += name + data;
    le(cd, 0x02014b50, 4); le(cd, 20, 2); le(cd, 20, 2); le(cd, 0, 2); le(cd, 0, 2); le(cd, 0, 4);
    le(cd, crc, 4); le(cd, data.size(), 4); le(cd, data.size(), 4); le(cd, name.size(), 2); le(cd, 0, 2);
    le(cd, 0, 2); le(cd, 0, 2); le(cd, 0, 2); le(cd, 0, 4); le(cd, offset, 4);
    cd += name;
  }
  const uint64_t cd_offset = out.size();
  out += cd;
  le(out, 0x06054b50, 4); le(out, 0, 2); le(out, 0, 2); le(out, entries.size(), 2); le(out, entries.size(), 2);
  le(out, cd.size(), 4); le(out, cd_offset, 4); le(out, 0, 2);
  return out;
}

void torch_zip_seeds(const std::string& dir, const std::string& source_dir) {
  // {"w": tensor (2, 2) of storage "0" (4 floats, cpu)}, as torch.save pickles it.
  const std::string pkl = lit(
      "\x80\x02}q\x00X\x01\x00\x00\x00wq\x01" "ctorch._utils\n_rebuild_tensor_v2\nq\x02((X\x07\x00\x00\x00storageq\x03"
      "ctorch\nFloatStorage\nq\x04X\x01\x00\x00\x00" "0q\x05X\x03\x00\x00\x00" "cpuq\x06K\x04tq\x07QK\x00K\x02K\x02"
      "\x86q\x08K\x02K\x01\x86q\x09\x89" "ccollections\nOrderedDict\nq\x0a)Rq\x0btq\x0cRq\x0ds.");
  std::string floats;
  for (float f : {1.f, 2.f, -3.f, 0.5f}) floats.append(reinterpret_cast<const char*>(&f), 4);
  write_file(dir + "/valid-small.pt",
             stored_zip({{"archive/data.pkl", pkl}, {"archive/byteorder", "little"}, {"archive/data/0", floats},
                         {"archive/version", "3\n"}}));
  const std::string pt = fixture(source_dir, "ckpt/iter_0000020/mp_rank_00/model_optim_rng.pt");
  if (!fs::exists(pt)) return;
  const std::string s = read_all(pt);
  write_file(dir + "/valid-megatron.pt", s);
  write_file(dir + "/bad-truncated.pt", s.substr(0, s.size() / 2));
}

std::string frame(const std::vector<std::string>& parts) {
  std::string out;
  auto u32 = [&](size_t v) {
    for (int i = 0; i < 4; ++i) out += char((v >> (8 * i)) & 0xff);
  };
  u32(parts.size());
  for (const auto& p : parts) {
    u32(p.size());
    out += p;
  }
  return out;
}

void store_seeds(const std::string& dir) {
  const std::string hello = frame({"HELLO", "fuzz-token", "0"});
  write_file(dir + "/valid-session",
             hello + frame({"SET", "addr/0", "127.0.0.1:1234"}) + frame({"GET", "addr/0"}) +
                 frame({"ADD", "count", "5"}) + frame({"ADD", "count", "-2"}) + frame({"CHECK", "addr/0", "count"}) +
                 frame({"WAIT", "addr/0"}) + frame({"GET", "missing"}) + frame({"WAIT", "never"}));
  write_file(dir + "/valid-unknown-command", hello + frame({"FROB", "x"}));
  write_file(dir + "/valid-wrong-token", frame({"HELLO", "other-job", "3"}));
  write_file(dir + "/valid-not-a-rank", "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
}

}  // namespace

void write_seeds(const std::string& target, const std::string& dir, const std::string& source_dir) {
  fs::create_directories(dir);
  if (target == "idx") idx_seeds(dir, source_dir);
  else if (target == "safetensors") safetensors_seeds(dir);
  else if (target == "ckpt_metadata") ckpt_metadata_seeds(dir);
  else if (target == "gpt2_bpe") gpt2_bpe_seeds(dir);
  else if (target == "jsonl") jsonl_seeds(dir);
  else if (target == "hf_tokenizer") hf_tokenizer_seeds(dir);
  else if (target == "torch_pickle") pickle_seeds(dir, source_dir);
  else if (target == "torch_zip") torch_zip_seeds(dir, source_dir);
  else if (target == "store_wire") store_seeds(dir);
  else TRIPOD_FAIL("no seeds for fuzz target '{}'", target);
}

}  // namespace tripod::fuzz
