// `tripod convert` writes whole or not at all, and never over another
// model's or run's files (interop/hf_export.h, ckpt/save_lock.h), through
// the real binary on a tiny checkpoint:
//   - --export-hf into a non-empty folder refuses, naming --replace, and
//     leaves the folder's bytes as they were;
//   - --replace with a full disk injected at the weights' write
//     (TRIPOD_CKPT_FAIL_AT=1, TRIPOD_CKPT_FAIL_ENOSPC=1) fails and leaves the
//     old folder byte for byte, with no temporary beside it;
//   - --replace succeeds: only the new model's files remain, the weights the
//     same bytes as an export into a new folder;
//   - --import-hf --save into a folder with checkpoints refuses, naming
//     --save-into-existing, and its latest marker does not move.
#include <gtest/gtest.h>

#include "comm/proc_util.h"

namespace fs = std::filesystem;
using namespace tripod::testing;

namespace {

std::map<std::string, std::string> folder_bytes(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out[e.path().filename().string()] = read_file(e.path().string());
  return out;
}

}  // namespace

TEST(ConvertCli, ExportAndImportNeverWriteOverOtherFiles) {
  const std::string dir = temp_dir("convert_guard"), ck = dir + "/ck", out = dir + "/hf", fresh = dir + "/hf_fresh";
  RunResult r = run_shell(tripod_bin() + " train --num-layers 2 --hidden-size 32 --num-attention-heads 4 "
                          "--seq-length 16 --mock-data --vocab-size 300 --micro-batch-size 1 --global-batch-size 4 "
                          "--lr 1e-3 --eval-interval 0 --train-iters 2 --save " + ck, 60);
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_EQ(run_shell(tripod_bin() + " convert --load " + ck + " --export-hf " + fresh, 60).code, 0);
  // Another model's folder.
  fs::create_directories(out);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"})
    std::ofstream(out + "/" + f) << "another model's " << f;
  const auto before = folder_bytes(out);

  r = run_shell(tripod_bin() + " convert --load " + ck + " --export-hf " + out, 60);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--export-hf " + out + " is not empty")) << r.output;
  EXPECT_TRUE(contains(r.output, "pass --replace")) << r.output;
  EXPECT_EQ(folder_bytes(out), before);

  r = run_shell("TRIPOD_CKPT_FAIL_AT=1 TRIPOD_CKPT_FAIL_ENOSPC=1 " + tripod_bin() + " convert --load " + ck +
                " --export-hf " + out + " --replace", 60);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "no space left")) << r.output;
  EXPECT_EQ(folder_bytes(out), before) << "a failed --replace changed the old folder";
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().rfind(".hf.", 0), std::string::npos) << e.path() << " was left over";

  r = run_shell(tripod_bin() + " convert --load " + ck + " --export-hf " + out + " --replace", 60);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(folder_bytes(out), folder_bytes(fresh)) << "--replace must leave only the new model's files";

  // An import into a folder that holds checkpoints.
  r = run_shell(tripod_bin() + " convert --import-hf " + fresh + " --save " + ck, 60);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--save " + ck + " already holds checkpoints of another run (iterations 2; latest 2) "
                                 "and this import does not resume from them")) << r.output;
  EXPECT_TRUE(contains(r.output, "--save-into-existing")) << r.output;
  EXPECT_EQ(read_file(ck + "/latest_checkpointed_iteration.txt"), "2\n");
}
