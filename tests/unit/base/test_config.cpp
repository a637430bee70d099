// Flag files with ${ENV} substitution (base/config.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>

#include "base/config.h"
#include "base/error.h"

namespace tripod {
namespace {

config::EnvLookup fake(std::map<std::string, std::string> vars) {
  return [vars](const std::string& n) -> std::optional<std::string> {
    auto it = vars.find(n);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(Config, WordsCommentsQuotesAndSubstitution) {
  const std::string text =
      "# a comment\n"
      "--num-layers 24 --hidden-size 1024   # trailing comment\n"
      "--data-path ${DATA_ROOT}/owt_text_document \\\n"
      "--save ${CKPT:-/tmp/ckpt}/run \"--name\" 'two words'\n";
  auto w = config::parse_flags(text, "run.conf", fake({{"DATA_ROOT", "/data"}}));
  const std::vector<std::string> want = {"--num-layers", "24", "--hidden-size", "1024", "--data-path",
                                         "/data/owt_text_document", "--save", "/tmp/ckpt/run", "--name", "two words"};
  EXPECT_EQ(w, want);
}

TEST(Config, UnsetVariableNamesFileLineAndVariable) {
  try {
    config::parse_flags("--lr 1e-4\n--data-path ${DATA_ROOT}/x\n", "run.conf", fake({}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("run.conf:2"), std::string::npos) << m;
    EXPECT_NE(m.find("DATA_ROOT"), std::string::npos) << m;
  }
}

TEST(Config, ExpandsInPlaceSoLaterFlagsOverride) {
  const std::string path = ::testing::TempDir() + "tripod_config_test.conf";
  {
    std::ofstream f(path);
    f << "--lr 1e-4 --train-iters 10\n";
  }
  std::string a0 = "tripod train", a1 = "--config", a2 = path, a3 = "--lr", a4 = "3e-4";
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), a4.data()};
  auto out = config::expand_config_args(5, argv);
  const std::vector<std::string> want = {"tripod train", "--lr", "1e-4", "--train-iters", "10", "--lr", "3e-4"};
  EXPECT_EQ(out, want);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tripod
