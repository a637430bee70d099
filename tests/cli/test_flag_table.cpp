// The flag table (train/flag_table.h):
//  - every flag of Megatron-LM at the recorded commit
//    (tests/cli/data/megatron_lm_d98e8a6_flags.txt) has a row;
//  - docs/megatron-flags.md is the table's page, as generated (regenerate
//    with `tripod train --flags-markdown > docs/megatron-flags.md`);
//  - the rows are consistent: planned rows name their feature, must-agree
//    rows have a value, tripod's rows have help;
//  - the cross-rank agreement is the must-agree rows, per-rank paths left out.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "train/args_agreement.h"
#include "train/flag_table.h"

namespace {

using tripod::train::FlagRow;
using tripod::train::FlagStatus;

std::string source(const std::string& path) {
  const char* src = std::getenv("TRIPOD_SOURCE_DIR");
  return std::string(src ? src : ".") + "/" + path;
}

TEST(FlagTable, EveryMegatronFlagOfTheRecordedCommitHasARow) {
  std::ifstream f(source("tests/cli/data/megatron_lm_d98e8a6_flags.txt"));
  ASSERT_TRUE(f) << "tests/cli/data/megatron_lm_d98e8a6_flags.txt not found";
  std::string line, header;
  int flags = 0;
  std::vector<std::string> missing;
  while (std::getline(f, line)) {
    if (line.rfind("#", 0) == 0) {
      header += line;
      continue;
    }
    if (line.empty()) continue;
    ++flags;
    const FlagRow* r = tripod::train::find_flag(line);
    if (!r || !r->megatron()) missing.push_back(line);
  }
  EXPECT_NE(header.find(tripod::train::kMegatronCommit), std::string::npos) << "the file names another commit";
  EXPECT_GT(flags, 850);
  std::string list;
  for (const auto& m : missing) list += " " + m;
  EXPECT_TRUE(missing.empty()) << missing.size() << " Megatron-LM flag(s) without a row in src/train/flag_table.cpp "
                               << "or src/train/megatron_rows*.cpp:" << list;
}

TEST(FlagTable, DocsPageIsGeneratedFromTheTable) {
  std::ifstream f(source("docs/megatron-flags.md"));
  std::stringstream checked_in;
  checked_in << f.rdbuf();
  EXPECT_TRUE(checked_in.str() == tripod::train::flag_docs_markdown())
      << "docs/megatron-flags.md differs from the flag table: regenerate it with "
         "`tripod train --flags-markdown > docs/megatron-flags.md`";
}

TEST(FlagTable, RowsAreConsistent) {
  const std::set<std::string> features = {"fp8", "moe", "context parallel", "fsdp/zero"};
  std::set<std::string> names;
  for (const FlagRow& r : tripod::train::flag_table()) {
    EXPECT_TRUE(names.insert(r.name).second) << r.name << " has two rows";
    EXPECT_EQ(std::string(r.name).rfind("--", 0), 0u) << r.name;
    EXPECT_FALSE(std::string(r.text).empty()) << r.name << " has no help or note";
    if (r.status == FlagStatus::Planned) EXPECT_TRUE(features.count(r.feature)) << r.name << ": " << r.feature;
    else EXPECT_TRUE(std::string(r.feature).empty()) << r.name;
    if (r.agree) EXPECT_TRUE(r.bound() || r.agreed_value) << r.name;
    if (r.status == FlagStatus::Accepted || r.status == FlagStatus::Planned || r.status == FlagStatus::Rejected)
      EXPECT_FALSE(r.bound()) << r.name << " is answered but sets a member";
  }
}

TEST(FlagTable, AgreementIsTheMustAgreeRows) {
  tripod::train::TrainArgs a;
  a.model.num_attention_heads = 8;
  a.optimizer.lr.max_lr = 2e-3;
  const auto v = tripod::train::agreed_args(a);
  auto value_of = [&](const std::string& flag) -> std::string {
    for (const auto& [f, x] : v)
      if (f == flag) return x;
    return "<absent>";
  };
  EXPECT_EQ(value_of("--num-attention-heads"), "8");
  EXPECT_EQ(value_of("--lr"), "0.002");
  EXPECT_EQ(value_of("--normalization"), "LayerNorm");
  EXPECT_EQ(value_of("--disable-bias-linear"), "off");
  EXPECT_EQ(value_of("--tensor-model-parallel-size"), "1");
  // Per-rank outputs, shared folders under different mounts, node-local tokenizer files.
  for (const char* f : {"--metrics-file", "--tensorboard-dir", "--save", "--load", "--vocab-file", "--merge-file",
                        "--tokenizer-model"})
    EXPECT_EQ(value_of(f), "<absent>") << f;
  EXPECT_GT(v.size(), 60u);
}

}  // namespace
