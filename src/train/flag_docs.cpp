// docs/megatron-flags.md from the flag table (train/flag_table.h):
// `tripod train --flags-markdown > docs/megatron-flags.md`.
#include <fmt/format.h>

#include "train/flag_table.h"

namespace tripod::train {
namespace {

constexpr const char* kIntro = R"(# Megatron-LM flags in tripod

<!-- Generated from src/train/flag_table.cpp and src/train/megatron_rows*.cpp by
     `tripod train --flags-markdown > docs/megatron-flags.md`; tests/cli/test_flag_table.cpp
     fails when this file differs from the table. Edit the table, not this file. -->

A Megatron-LM job script for GPT pretraining runs under `tripod train`
unchanged as far as its flags go. Every flag of Megatron-LM at commit
{commit} (2026-08-22) — the ones `megatron/training/arguments.py` spells
and the ones its config dataclasses add (TransformerConfig, TrainingConfig,
CheckpointConfig, SchedulerConfig, ...) — plus flags that older Megatron
releases took and job scripts still pass, has one of these answers:

- **implemented**: the flag works as in Megatron (see `tripod train --help`).
- **accepted**: it has no meaning in tripod (for example `--use-flash-attn`:
  fused attention is always on); it parses, and rank 0 logs one line
  `--use-flash-attn: accepted and ignored: fused attention is always on`.
- **planned**: the feature it belongs to (FP8 training, mixture of experts,
  context parallelism, ZeRO-2/3 and FSDP) is not in this version of tripod;
  the run stops before any work naming the feature and what to do meanwhile:
  `error: --fp8-output-proj is a Megatron-LM flag that tripod does not take yet: planned: FP8 training ...`.
- **rejected**: the run stops before any work with the reason and what to use
  instead:
  `error: --rotary-interleaved is a Megatron-LM flag that tripod does not take: not implemented: the model options are GPT-2 and the Llama family (docs/llama.md); drop the flag`.

Every planned or rejected flag of one command line is named in one error.
tripod's own flags (**tripod only**) are listed too. A flag that is neither
tripod's nor Megatron's fails with the closest known names:
`unknown flag(s) --lr-warmup-fractoin ... hint: --lr-warmup-fractoin: did you mean --lr-warmup-fraction?`.

Code: one table, `src/train/flag_table.cpp` (tripod's flags: the member each
sets, help, must-agree-across-ranks, which commands take it) and
`src/train/megatron_rows*.cpp` (the Megatron-LM flags tripod does not
implement). It drives `tripod train`/`plan`/`doctor --` flag registration,
the start-up check that every rank got the same flags, and this page.
`tests/cli/data/megatron_lm_d98e8a6_flags.txt` lists Megatron-LM's flags at
that commit; a test fails when one has no row. `tests/cli/test_megatron_flags.cpp`
parses the tables below and checks that every flag parses as its row says.

Notes on the implemented flags that behave in a tripod-specific way:

- The Llama-family flags (`--position-embedding-type`, `--normalization`,
  `--swiglu`, `--group-query-attention`, `--num-query-groups`,
  `--untie-embeddings-and-output-weights`, `--disable-bias-linear`, ...):
  docs/llama.md. `--kv-channels` takes only `--hidden-size /
  --num-attention-heads` (the head size tripod uses); another value stops the
  run with that message.
- `--lr-warmup-fraction F`: warmup = F x decay iterations (`--lr-decay-iters`,
  else `--train-iters`), rounded down to whole iterations; not together with
  a non-zero `--lr-warmup-iters`.
- `--exit-interval N`: at a multiple of N iterations, save (with `--save`)
  and exit 0, as Megatron.
- `--exit-duration-in-mins M`: after M minutes, every rank stops at the next
  iteration boundary, saves (with `--save`) and exits 0 (the
  `--exit-signal-handler` path).
- `--load DIR`: a directory that does not exist yet or holds no checkpoint is
  a fresh start with a warning (one job script starts and resumes a run); a
  damaged checkpoint stops the run. A Megatron-LM checkpoint (legacy
  `mp_rank_*/model_optim_rng.pt`, `release`, or `torch_dist`) stops it with
  what it is and the conversion to run (`tripod convert --import-megatron`,
  docs/checkpoints.md).
- `--ckpt-step N`: with `--load DIR`, resume from `iter_N` instead of the
  latest (a missing `iter_N` is an error listing the saved iterations).
  When the latest checkpoint is damaged, the error names the newest earlier
  iteration that verifies: `hint: iteration 20 is the newest earlier
  checkpoint that verifies: pass --ckpt-step 20 to resume from it`.
- `--device` (tripod's own): defaults to `cuda` when the build has CUDA and a
  GPU is visible, `cpu` otherwise; the start-up log says which.
- Every float flag (`--lr`, `--norm-epsilon`, `--hidden-dropout`, ...)
  refuses NaN and infinities at parse time, naming the flag: `--lr: 'inf' is
  not a finite number (NaN and infinities are refused)`.
- `--tokenizer-type`: Megatron's names, mapped onto tripod's tokenizers or
  refused with what to use (docs/data.md, "Tokenizers").
- `--data-cache-path DIR`: the dataset index caches go to DIR; without it,
  beside the data, or a per-user folder when the data's folder is read-only
  (docs/data.md, "Index cache").

"takes" is what follows the flag: nothing (—), one value, or a list.
)";

std::string cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

void section(std::string& md, const std::string& title, const std::string& about,
             bool (*pick)(const FlagRow&, const char*), const char* arg = "") {
  std::string rows;
  int n = 0;
  for (const FlagRow& r : flag_table()) {
    if (r.hidden || !pick(r, arg)) continue;
    rows += fmt::format("| `{}` | {} | {} | {} |\n", r.name, to_string(r.takes), to_string(r.status), cell(r.text));
    ++n;
  }
  md += fmt::format("\n### {} ({})\n\n{}\n\n| flag | takes | answer | note |\n| --- | --- | --- | --- |\n{}", title, n,
                    about, rows);
}

}  // namespace

std::string flag_docs_markdown() {
  std::string md = kIntro;
  const auto at = md.find("{commit}");
  md.replace(at, 8, kMegatronCommit);
  section(md, "implemented", "Megatron-LM's flags that work as in Megatron; the note is the `--help` text.",
          [](const FlagRow& r, const char*) { return r.status == FlagStatus::Implemented; });
  section(md, "tripod only", "tripod's own flags.",
          [](const FlagRow& r, const char*) { return r.status == FlagStatus::TripodOnly; });
  section(md, "accepted", "Parsed, with no meaning in tripod; rank 0 logs the note.",
          [](const FlagRow& r, const char*) { return r.status == FlagStatus::Accepted; });
  for (const char* feature : {"fp8", "moe", "context parallel", "fsdp/zero"})
    section(md, fmt::format("planned: {}", feature), "The run stops naming the feature and what to do meanwhile.",
            [](const FlagRow& r, const char* f) {
              return r.status == FlagStatus::Planned && std::string(r.feature) == f;
            },
            feature);
  section(md, "rejected", "The run stops with why and what to use instead.",
          [](const FlagRow& r, const char*) { return r.status == FlagStatus::Rejected; });
  return md;
}

}  // namespace tripod::train
