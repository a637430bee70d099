// Implementation of fuzz_ckpt_fixture.h.
#include "fuzz_ckpt_fixture.h"

#include <fmt/format.h>

#include <filesystem>

#include "ckpt/safetensors.h"
#include "ckpt/sharded_checkpoint.h"

namespace tripod::fuzz {

std::string make_checkpoint_fixture(const std::string& dir) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string tmp = ckpt::prepare_save(dir, 1);
  auto filled = [](const Shape& s, float base) {
    Tensor t = Tensor::zeros(s, DType::F32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = base + float(i);
    return t;
  };
  for (int tp = 0; tp < 2; ++tp) {
    std::vector<ckpt::ShardTensor> ts;
    ts.push_back({"model.embedding.word_embeddings.weight", {8, 4}, model::ShardDim::Rows, filled({4, 4}, 10.f * tp)});
    ts.push_back({"model.decoder.layers.0.mlp.linear_fc2.weight", {4, 6}, model::ShardDim::Cols,
                  filled({4, 3}, 100.f * tp)});
    ts.push_back({"model.decoder.final_layernorm.weight", {4}, model::ShardDim::None, filled({4}, 1.f)});
    ckpt::write_rank_file(tmp, tp, 2, 0, ts);
  }
  config::GptConfig c;
  c.num_layers = 1;
  c.hidden_size = 4;
  c.num_attention_heads = 2;
  c.seq_length = 8;
  c.vocab_size = 8;
  c.make_vocab_size_divisible_by = 4;
  nlohmann::json meta;
  meta["model"] = ckpt::config_to_json(c);
  meta["args"] = {{"tensor_model_parallel_size", 2}, {"pipeline_model_parallel_size", 1}};
  ckpt::commit_save(dir, 1, meta, 0);
  return dir;
}

std::string with_metadata_checksum(nlohmann::json meta) {
  meta.erase("crc32");
  const std::string body = meta.dump();
  meta["crc32"] = fmt::format("{:08x}", ckpt::crc32(body.data(), body.size()));
  return meta.dump(1) + "\n";
}

}  // namespace tripod::fuzz
