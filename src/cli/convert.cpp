// `tripod convert`: Hugging Face GPT-2, Llama, Qwen3, Mixtral, Qwen2-MoE and
// Qwen3-MoE export and import, one model.safetensors or shards
// (interop/hf_gpt2.h, interop/hf_llama.h, interop/hf_moe.h,
// interop/hf_weights.h; the model's options pick the format),
// Megatron-LM legacy checkpoint import (interop/megatron_import.h).
//   tripod convert --load DIR --export-hf OUT      tripod checkpoint -> HF folder
//   tripod convert --import-hf IN --save DIR       HF folder -> tripod checkpoint (iteration 0)
//   tripod convert --import-megatron IN --save DIR Megatron --ckpt-format torch -> tripod (its iteration)
// Flags only; the conversion lives in interop/.
#include <CLI/CLI.hpp>
#include <filesystem>

#include "base/error.h"
#include "base/log.h"
#include "cli/command.h"
#include "data/tokenizer.h"
#include "ckpt/save_lock.h"
#include "interop/hf_export.h"
#include "interop/hf_gpt2.h"
#include "interop/hf_llama.h"
#include "interop/hf_moe.h"
#include "interop/megatron_import.h"
#include "train/output_checks.h"

namespace tripod::cli {
namespace {

int run_convert(int argc, char** argv) {
  CLI::App app{"Convert checkpoints to and from Hugging Face GPT2LMHeadModel, LlamaForCausalLM, "
               "Qwen3ForCausalLM, MixtralForCausalLM, Qwen2MoeForCausalLM or Qwen3MoeForCausalLM (config.json + model.safetensors, or shards with "
               "model.safetensors.index.json as save_pretrained writes above 5GB; MoE experts per-expert or fused, "
               "docs/moe.md).\n"
               "Export: tripod convert --load CKPT --export-hf OUT [--iteration N] [--replace] [--max-shard-size 5GB]\n"
               "Import: tripod convert --import-hf IN --save CKPT\n"
               "        [--vocab-file F --merge-file F | --tokenizer-model F]\n"
               "        tripod convert --import-megatron MEGATRON_SAVE_DIR --save CKPT [--vocab-file F ...]\n"
               "then:   tripod train --load CKPT --finetune ..."};
  std::string load, save, export_dir, import_dir, megatron_dir;
  int64_t iteration = -1;
  nlohmann::json tok = {{"tokenizer_type", "GPT2BPETokenizer"}, {"vocab_file", ""}, {"merge_file", ""},
                        {"tokenizer_model", ""}};
  std::string vocab, merges, tok_model, tok_type = "GPT2BPETokenizer";
  app.add_option("--load", load, "tripod checkpoint directory to export");
  app.add_option("--iteration", iteration, "iteration to export (default: the latest)");
  app.add_option("--export-hf", export_dir, "output folder for the Hugging Face files (GPT-2, Llama, Qwen3, Mixtral, Qwen2-MoE or Qwen3-MoE, by the model)");
  app.add_option("--import-hf", import_dir, "Hugging Face GPT-2, Llama, Qwen3, Mixtral, Qwen2-MoE or Qwen3-MoE folder (save_pretrained; one file or shards) to import");
  app.add_option("--import-megatron", megatron_dir,
                 "Megatron-LM checkpoint to import (--ckpt-format torch: DIR/iter_N/mp_rank_*/model_optim_rng.pt; "
                 "any TP/PP; model weights)");
  app.add_option("--save", save, "tripod checkpoint directory to write (with --import-hf / --import-megatron)");
  bool replace = false, save_into_existing = false;
  std::string max_shard_size = "5GB";
  app.add_option("--max-shard-size", max_shard_size,
                 "with --export-hf: weights above this size are written as shards model-0000i-of-0000N.safetensors "
                 "plus model.safetensors.index.json, as save_pretrained (transformers' syntax: 5GB, 500MB, 2GiB or "
                 "bytes; default 5GB)");
  app.add_flag("--replace", replace, "with --export-hf: replace a non-empty output folder (refused without it)");
  app.add_flag("--save-into-existing", save_into_existing,
               "with --save: write into a folder that holds other checkpoints (refused without it)");
  app.add_option("--tokenizer-type", tok_type,
                 "recorded in the imported checkpoint (default GPT2BPETokenizer; with --tokenizer-model: "
                 "HuggingFaceTokenizer for a .json, else SentencePieceTokenizer)");
  app.add_option("--tokenizer-model", tok_model, "SentencePiece model (Llama-2 tokenizer.model) or tokenizer.json (Llama 3, Qwen2), recorded");
  app.add_option("--vocab-file", vocab, "GPT-2 vocab JSON, recorded in the imported checkpoint");
  app.add_option("--merge-file", merges, "GPT-2 merges file, recorded in the imported checkpoint");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const bool exporting = !export_dir.empty(), importing = !import_dir.empty(), megatron = !megatron_dir.empty();
  TRIPOD_CHECK_HINT(exporting || app.count("--max-shard-size") == 0, "pass --max-shard-size with --export-hf only",
                    "--max-shard-size sets the size of exported shards; an import reads whatever shards it finds");
  TRIPOD_CHECK_HINT(int(exporting) + int(importing) + int(megatron) == 1,
                    "pass --load DIR --export-hf OUT, --import-hf IN --save DIR, or --import-megatron IN --save DIR",
                    "tripod convert needs exactly one of --export-hf, --import-hf and --import-megatron");
  tok["tokenizer_type"] = tok_type;
  tok["vocab_file"] = vocab;
  tok["merge_file"] = merges;
  // An import writes a checkpoint like a run: it holds --save's lock and
  // refuses a folder with other checkpoints (train/output_checks.h).
  std::unique_ptr<ckpt::SaveDirLock> save_lock;
  if (!save.empty() && !exporting) {
    save_lock = ckpt::SaveDirLock::acquire(save, "tripod convert");
    train::CheckpointArgs ck;
    ck.save = save;
    ck.save_into_existing = save_into_existing;
    train::check_save_dir_is_this_runs(ck, "this import");
  }
  if (megatron) {
    TRIPOD_CHECK_HINT(!save.empty(), "pass --save DIR for the tripod checkpoint", "--import-megatron needs --save");
    const auto r = interop::import_megatron(megatron_dir, save, {{"tokenizer", tok}});
    log::info("imported {} ({}; TP {} x PP {}{}) into {} at iteration {}, {} consumed samples, model weights only; "
              "train with --load {} --finetune (or --no-load-optim to continue its schedule)",
              megatron_dir, r.config.describe(), r.tp, r.pp, r.vpp > 1 ? fmt::format(" x vpp {}", r.vpp) : "", save,
              r.iteration, r.consumed_samples, save);
    return 0;
  }
  if (exporting) {
    TRIPOD_CHECK_HINT(!load.empty(), "pass --load DIR (a tripod checkpoint directory)", "--export-hf needs --load");
    const auto reader = ckpt::CheckpointReader::open(load, iteration);
    interop::export_hf(reader, export_dir, replace, interop::parse_shard_size(max_shard_size, "--max-shard-size"));
    log::info("exported {} (iteration {}) to {} (config.json + {})", reader.path(), reader.iteration(), export_dir,
              std::filesystem::exists(std::filesystem::path(export_dir) / "model.safetensors")
                  ? "model.safetensors"
                  : "shards of model.safetensors.index.json");
  } else {
    TRIPOD_CHECK_HINT(!save.empty(), "pass --save DIR for the tripod checkpoint", "--import-hf needs --save");
    if (!tok_model.empty() && app.count("--tokenizer-type") == 0) tok_type = data::default_tokenizer_type(tok_model);
    tok["tokenizer_type"] = tok_type;
    tok["tokenizer_model"] = tok_model;
    tok["vocab_file"] = vocab;
    tok["merge_file"] = merges;
    const std::string arch = interop::hf_architecture(import_dir);
    const bool llama = interop::is_hf_llama_architecture(arch);
    TRIPOD_CHECK_HINT(llama || arch == "GPT2LMHeadModel" || arch == "GPT2Model" || arch == "gpt2" || arch.empty(),
                      "import GPT2LMHeadModel, LlamaForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, "
                      "Qwen2MoeForCausalLM or Qwen3MoeForCausalLM checkpoints",
                      "{}/config.json: architecture {} is not supported", import_dir, arch);
    const auto cfg = llama ? interop::import_hf_llama(import_dir, save, {{"tokenizer", tok}})
                           : interop::import_hf_gpt2(import_dir, save, {{"tokenizer", tok}});
    log::info("imported {} ({}) into {} at iteration 0; fine-tune with tripod train --load {} --finetune",
              import_dir, cfg.describe(), save, save);
    if (cfg.moe.aux_loss_coeff > 0.f)  // a training flag, not kept in the checkpoint
      log::info("config.json asks for the load-balancing loss (output_router_logits): train with "
                "--moe-aux-loss-coeff {}", cfg.moe.aux_loss_coeff);
  }
  return 0;
}

}  // namespace

TRIPOD_REGISTER_COMMAND(convert, "convert",
                        "export/import Hugging Face GPT-2, Llama and MoE checkpoints, import Megatron-LM ones", run_convert);

}  // namespace tripod::cli
