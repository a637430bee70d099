// `tripod generate`: sample text from a checkpoint saved at any layout, on
// one process, on the GPU when there is one (generate/generate.h). Flags,
// the device and the closing tokens/s line.
//   tripod generate --load DIR --prompt "In the beginning" --max-new-tokens 40 --seed 1
//   tripod generate --load DIR --prompt-ids 1,5,9 --greedy --logits-out L.f32   (token ids in and out)
//   tripod generate --load DIR --prompt-ids 1,5,9 --greedy --device cpu --no-kv-cache   (the reference path)
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>

#include "base/error.h"
#include "base/log.h"
#include "ckpt/reshard.h"
#include "cli/command.h"
#include "cli/default_device.h"
#include "cli/device.h"
#include "cli/table_flags.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "generate/generate.h"

namespace tripod::cli {
namespace {

// Status lines go to stderr: stdout carries only the text (or the ids).
template <typename... Args>
void note(fmt::format_string<Args...> f, Args&&... args) {
  fmt::print(stderr, "{}\n", fmt::format(f, std::forward<Args>(args)...));
}

void write_f32(const std::string& path, const std::string& flag, const float* data, size_t n) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  TRIPOD_CHECK(f, "{} {}: cannot open for writing", flag, path);
  const size_t w = std::fwrite(data, sizeof(float), n, f);
  TRIPOD_CHECK(std::fclose(f) == 0 && w == n, "{} {}: write failed", flag, path);
}

// The closing line: what ran where, and how fast.
void log_speed(const generate::DecodeStats& st, const backend::Backend& be, DType dt) {
  const std::string how = st.kv_cache ? "KV cache"
                          : st.no_cache_reason.empty() ? "no KV cache (--no-kv-cache)"
                                                       : "no KV cache (" + st.no_cache_reason + ")";
  const double t = st.total_seconds();
  const double later = st.new_tokens > 1 ? static_cast<double>(st.new_tokens - 1) / st.decode_seconds : 0.0;
  note("generated {} tokens in {:.3f} s: {:.1f} tokens/s (prompt of {} tokens and the first token {:.1f} ms, "
            "then {:.1f} tokens/s; {}, {}, {})",
            st.new_tokens, t, t > 0 ? static_cast<double>(st.new_tokens) / t : 0.0, st.prompt_tokens,
            1e3 * st.prefill_seconds, later, how, be.name(), dtype_name(dt));
}

int run_generate(int argc, char** argv) {
  CLI::App app{"Generate text from a checkpoint (any saved layout; runs at tp 1 on one GPU, or on the CPU).\n"
               "Example: tripod generate --load ckpt --prompt \"In the beginning\" --max-new-tokens 40 --top-k 40"};
  std::string load, prompt, prompt_ids, logits_out, step_logits_out, device;
  int64_t iteration = -1;
  generate::SamplingOptions o;
  generate::DecodeOptions d;
  data::TokenizerConfig tc;
  bool ignore_eos = false, bf16 = false, no_kv_cache = false;
  app.add_option("--load", load, "checkpoint directory")->required();
  app.add_option("--iteration", iteration, "iteration to load (default: the latest)");
  app.add_option("--prompt", prompt, "text to continue");
  app.add_option("--prompt-ids", prompt_ids,
                 "token ids to continue, comma-separated (no tokenizer: prints the generated ids)");
  app.add_option("--logits-out", logits_out,
                 "write the prompt's logits (T, vocab) as little-endian float32 to FILE (before generating)");
  app.add_option("--max-new-tokens", o.max_new_tokens,
                 "tokens to generate; the prompt plus these must fit the model's max positions (left at the "
                 "default, it shrinks to fit)")
      ->capture_default_str();
  app.add_option("--temperature", o.temperature)->capture_default_str()->check(finite_number());
  app.add_option("--top-k", o.top_k, "sample from the k most likely tokens (0: all)")->capture_default_str();
  app.add_option("--top-p", o.top_p, "nucleus sampling mass (1: off)")->capture_default_str()->check(finite_number());
  app.add_flag("--greedy", o.greedy, "always take the most likely token");
  app.add_option("--seed", o.seed)->capture_default_str();
  app.add_flag("--ignore-eos", ignore_eos, "do not stop at the end-of-document token");
  app.add_option("--device", device,
                 "cuda or cpu (default: the GPU when this build has CUDA and one is visible, as train)");
  app.add_flag("--bf16", bf16,
               "compute in bf16 (default fp32, the checkpoint's weights: the GPU then gives the CPU's greedy ids; "
               "bf16 halves the memory and may change ids after a few tokens)");
  app.add_flag("--no-kv-cache", no_kv_cache,
               "run the whole sequence again for every new token instead of caching keys and values (the "
               "reference path: same ids, slower)");
  app.add_option("--step-logits-out", step_logits_out,
                 "write the logits each new token was drawn from, (new tokens, vocab) little-endian float32, to FILE");
  app.add_option("--tokenizer-type", tc.type, "default: the checkpoint's");
  app.add_option("--vocab-file", tc.vocab_file, "default: the checkpoint's");
  app.add_option("--merge-file", tc.merge_file, "default: the checkpoint's");
  app.add_option("--tokenizer-model", tc.tokenizer_model, "default: the checkpoint's");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  TRIPOD_CHECK_HINT(o.temperature > 0 || o.greedy, "use --temperature > 0, or --greedy", "--temperature is {}",
                    o.temperature);
  TRIPOD_CHECK_HINT(o.top_p > 0 && o.top_p <= 1, "use --top-p in (0, 1]", "--top-p is {}", o.top_p);
  TRIPOD_CHECK_HINT(prompt.empty() != prompt_ids.empty(), "pass --prompt TEXT or --prompt-ids 1,2,3",
                    "tripod generate needs exactly one of --prompt and --prompt-ids");
  TRIPOD_CHECK_HINT(device.empty() || device == "cuda" || device == "cpu", "pass --device cuda or --device cpu",
                    "--device {}: unknown device", device);
  const auto reader = ckpt::CheckpointReader::open(load, iteration);
  config::GptConfig cfg = reader.config();
  if (device.empty()) {
    const DeviceChoice c = default_device();
    device = c.device;
    if (device == "cuda" && cfg.moe.enabled()) {
      device = "cpu";
      note("device: cpu (the CUDA backend has no MoE kernels yet; --device overrides)");
    } else {
      note("device: {} ({}; --device overrides)", device, c.reason);
    }
    if (c.gpu_without_cuda_build)
      log::warn("this node has an NVIDIA GPU but this tripod was built without CUDA, so it generates on the CPU; "
                "rebuild with -DTRIPOD_CUDA=ON to use the GPU");
  }
  const auto be = make_backend(device);
  model::StageConfig stage;
  stage.compute_dtype = bf16 ? DType::BF16 : DType::F32;
  TRIPOD_CHECK_HINT(be->computes_in(stage.compute_dtype), "drop --bf16", "--bf16: the {} backend does not compute in bf16",
                    be->name());
  std::unique_ptr<model::GptModel> m;  // built once the inputs are checked
  auto build = [&] {
    m = std::make_unique<model::GptModel>(cfg, stage, *be);
    ckpt::load_params(reader, m->params(), 0, m->config().init_method_std, m->config().num_layers);
    m->params().sync_compute();  // the bf16 copy of the loaded weights (no-op in fp32)
  };
  d.kv_cache = !no_kv_cache;
  std::vector<float> step_logits;
  if (!step_logits_out.empty()) d.step_logits = &step_logits;
  auto write_logits = [&](const std::vector<int32_t>& ids) {
    if (logits_out.empty()) return;
    const Tensor l = generate::sequence_logits(*m, ids);
    write_f32(logits_out, "--logits-out", l.data<float>(), static_cast<size_t>(l.numel()));
  };
  const bool max_new_given = app.count("--max-new-tokens") > 0;
  auto run = [&](std::vector<int32_t>& ids) {
    // Left at its default, --max-new-tokens shrinks to the positions the prompt leaves (given, it must fit).
    const int64_t room = m->config().max_position_embeddings - static_cast<int64_t>(ids.size());
    if (!max_new_given && room >= 1 && o.max_new_tokens > room) {
      note("--max-new-tokens {}: the model's {} positions less the prompt's {} tokens (default {})", room,
           m->config().max_position_embeddings, ids.size(), o.max_new_tokens);
      o.max_new_tokens = room;
    }
    const generate::DecodeStats st = generate::generate(*m, ids, o, d);
    if (!step_logits_out.empty()) write_f32(step_logits_out, "--step-logits-out", step_logits.data(), step_logits.size());
    return st;
  };
  if (!prompt_ids.empty()) {  // ids in, ids out: no tokenizer
    std::vector<int32_t> ids;
    size_t at = 0;
    while (at <= prompt_ids.size()) {
      const size_t comma = std::min(prompt_ids.find(',', at), prompt_ids.size());
      const std::string w = prompt_ids.substr(at, comma - at);
      char* end = nullptr;
      const long v = std::strtol(w.c_str(), &end, 10);
      TRIPOD_CHECK_HINT(!w.empty() && *end == '\0' && v >= 0 && v < cfg.vocab_size,
                        "pass ids below the vocabulary size, comma-separated",
                        "--prompt-ids: '{}' is not a token id of this model (vocabulary {})", w, cfg.vocab_size);
      ids.push_back(static_cast<int32_t>(v));
      at = comma + 1;
    }
    build();
    write_logits(ids);
    o.stop_token = -1;
    const size_t n_prompt = ids.size();
    const generate::DecodeStats st = run(ids);
    std::string line;
    for (size_t i = n_prompt; i < ids.size(); ++i) line += (line.empty() ? "" : " ") + std::to_string(ids[i]);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    log_speed(st, *be, stage.compute_dtype);
    return 0;
  }
  const auto& meta = reader.metadata();
  if (meta.contains("tokenizer")) {  // flags override what the checkpoint recorded
    const auto& t = meta["tokenizer"];
    if (tc.type.empty()) tc.type = t.value("tokenizer_type", "");
    if (tc.vocab_file.empty()) tc.vocab_file = t.value("vocab_file", "");
    if (tc.merge_file.empty()) tc.merge_file = t.value("merge_file", "");
    if (tc.tokenizer_model.empty()) tc.tokenizer_model = t.value("tokenizer_model", "");
  }
  if (tc.type.empty()) tc.type = data::default_tokenizer_type(tc.tokenizer_model);
  TRIPOD_CHECK_HINT(!tc.vocab_file.empty() || !tc.tokenizer_model.empty(),
                    "pass --vocab-file and --merge-file (or --tokenizer-model)",
                    "{} records no tokenizer files", reader.path());
  const auto tok = data::make_tokenizer(tc);
  // A tokenizer.json may have fewer ids than the model's (padded) embedding, as Qwen2's does.
  const bool fits = data::tokenizer_type_for(tc.type) == "HuggingFaceTokenizer" ? tok->vocab_size() <= cfg.vocab_size
                                                                                : tok->vocab_size() == cfg.vocab_size;
  TRIPOD_CHECK_HINT(fits, "pass the tokenizer files the model was trained with",
                    "the tokenizer has {} tokens but the checkpoint's vocabulary is {}", tok->vocab_size(),
                    cfg.vocab_size);
  build();
  o.stop_token = ignore_eos ? -1 : tok->eod();
  // The tokenizer sees ill-formed UTF-8 as U+FFFD (NOTE [Invalid UTF-8
  // policy] in data/utf8.h): the printed prompt is that text, so the output
  // is valid UTF-8 and shows what the model continued.
  if (!data::is_valid_utf8(prompt)) {
    int64_t replaced = 0;
    prompt = data::repair_utf8(prompt, &replaced);
    log::warn("--prompt is not valid UTF-8: repaired, its {} ill-formed byte sequence(s) replaced by U+FFFD; the "
              "model sees, and the output repeats, the repaired prompt",
              replaced);
  }
  std::vector<int32_t> ids;
  tok->encode(prompt, &ids);
  TRIPOD_CHECK_HINT(!ids.empty(), "pass a non-empty --prompt", "the prompt encodes to no tokens");
  write_logits(ids);
  const size_t n_prompt = ids.size();
  const generate::DecodeStats st = run(ids);
  std::vector<int32_t> gen(ids.begin() + static_cast<std::ptrdiff_t>(n_prompt), ids.end());
  if (!gen.empty() && gen.back() == o.stop_token) gen.pop_back();
  const std::string text = prompt + tok->decode(gen);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  log_speed(st, *be, stage.compute_dtype);
  return 0;
}

}  // namespace

TRIPOD_REGISTER_COMMAND(generate, "generate", "sample text from a checkpoint (greedy, top-k, top-p)", run_generate);

}  // namespace tripod::cli
