// `tripod generate`: sample text from a checkpoint saved at any layout, on
// one CPU process (generate/generate.h). Flags only.
//   tripod generate --load DIR --prompt "In the beginning" --max-new-tokens 40 --seed 1
//   tripod generate --load DIR --prompt-ids 1,5,9 --greedy --logits-out L.f32   (token ids in and out)
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>

#include "backend/cpu/cpu_backend.h"
#include "base/error.h"
#include "base/log.h"
#include "ckpt/reshard.h"
#include "cli/command.h"
#include "cli/table_flags.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "generate/generate.h"

namespace tripod::cli {
namespace {

int run_generate(int argc, char** argv) {
  CLI::App app{"Generate text from a checkpoint (any saved layout; runs at tp 1 on the CPU).\n"
               "Example: tripod generate --load ckpt --prompt \"In the beginning\" --max-new-tokens 40 --top-k 40"};
  std::string load, prompt, prompt_ids, logits_out;
  int64_t iteration = -1;
  generate::SamplingOptions o;
  data::TokenizerConfig tc;
  bool ignore_eos = false;
  app.add_option("--load", load, "checkpoint directory")->required();
  app.add_option("--iteration", iteration, "iteration to load (default: the latest)");
  app.add_option("--prompt", prompt, "text to continue");
  app.add_option("--prompt-ids", prompt_ids,
                 "token ids to continue, comma-separated (no tokenizer: prints the generated ids)");
  app.add_option("--logits-out", logits_out,
                 "write the prompt's logits (T, vocab) as little-endian float32 to FILE (before generating)");
  app.add_option("--max-new-tokens", o.max_new_tokens)->capture_default_str();
  app.add_option("--temperature", o.temperature)->capture_default_str()->check(finite_number());
  app.add_option("--top-k", o.top_k, "sample from the k most likely tokens (0: all)")->capture_default_str();
  app.add_option("--top-p", o.top_p, "nucleus sampling mass (1: off)")->capture_default_str()->check(finite_number());
  app.add_flag("--greedy", o.greedy, "always take the most likely token");
  app.add_option("--seed", o.seed)->capture_default_str();
  app.add_flag("--ignore-eos", ignore_eos, "do not stop at the end-of-document token");
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
  const auto reader = ckpt::CheckpointReader::open(load, iteration);
  config::GptConfig cfg = reader.config();
  auto load_model = [&](model::GptModel& m) {
    ckpt::load_params(reader, m.params(), 0, m.config().init_method_std, m.config().num_layers);
  };
  auto write_logits = [&](model::GptModel& m, const std::vector<int32_t>& ids) {
    if (logits_out.empty()) return;
    const Tensor l = generate::sequence_logits(m, ids);
    std::FILE* f = std::fopen(logits_out.c_str(), "wb");
    TRIPOD_CHECK(f, "--logits-out {}: cannot open for writing", logits_out);
    const size_t n = std::fwrite(l.raw(), 1, l.nbytes(), f);
    TRIPOD_CHECK(std::fclose(f) == 0 && n == l.nbytes(), "--logits-out {}: write failed", logits_out);
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
    auto be = backend::make_cpu_backend();
    model::GptModel m(cfg, model::StageConfig{}, *be);
    load_model(m);
    write_logits(m, ids);
    o.stop_token = -1;
    const size_t n_prompt = ids.size();
    generate::generate(m, ids, o);
    std::string line;
    for (size_t i = n_prompt; i < ids.size(); ++i) line += (line.empty() ? "" : " ") + std::to_string(ids[i]);
    std::printf("%s\n", line.c_str());
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
  auto be = backend::make_cpu_backend();
  model::GptModel m(cfg, model::StageConfig{}, *be);
  load_model(m);
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
  write_logits(m, ids);
  const size_t n_prompt = ids.size();
  generate::generate(m, ids, o);
  std::vector<int32_t> gen(ids.begin() + static_cast<std::ptrdiff_t>(n_prompt), ids.end());
  if (!gen.empty() && gen.back() == o.stop_token) gen.pop_back();
  const std::string text = prompt + tok->decode(gen);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace

TRIPOD_REGISTER_COMMAND(generate, "generate", "sample text from a checkpoint (greedy, top-k, top-p)", run_generate);

}  // namespace tripod::cli
