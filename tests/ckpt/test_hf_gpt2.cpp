// Hugging Face GPT-2 export/import (`tripod convert`):
//  - export a briefly trained checkpoint; a plain GPT-2 forward in PyTorch
//    (hf_gpt2_forward.py, float64, HF names and Conv1D layout) gives logits
//    within 1e-5 of tripod's (GptModel::forward + last_logits);
//  - import the export, export again: model.safetensors and config.json are
//    byte-identical, and every imported weight equals the original bit for bit;
//  - `tripod train --load IMPORTED --finetune` starts at iteration 0 and trains.
#include <gtest/gtest.h>

#include "hf_export_check.h"

namespace {

using namespace ckpt_test;
using namespace tripod;

const std::string kModel =
    "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --mock-data --vocab-size 500 "
    "--micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --seed 5 --log-interval 1 --eval-interval 0";

TEST(HfGpt2, ExportMatchesPyTorchAndImportRoundTrips) {
  Scratch s("hf");
  const HfExportRun r = export_and_compare(s, kModel, "hf_gpt2_forward.py", 500);
  if (HasFailure()) return;
  if (r.no_torch) GTEST_SKIP() << "python3-torch not installed";
  import_round_trip(s, r, 64);
  if (HasFatalFailure()) return;
  finetune_from_import(s, r, kModel);
  if (!HasFailure()) fs::remove_all(s.dir);
}

}  // namespace
