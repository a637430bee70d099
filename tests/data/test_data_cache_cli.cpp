// Where `tripod train` writes the dataset index caches (NOTE [GPT index
// cache] in data/build_indexed.cpp), through the real executable:
//  - beside the data when its folder is writable (as before);
//  - --data-cache-path DIR (Megatron's flag): there, named by the prefix;
//  - a read-only data folder: a per-user folder with a log line, and the
//    run trains with the same losses as on writable data;
//  - an unwritable --data-cache-path stops naming the path.
// Tests run as root, for whom a folder's mode bits do not stop writes: as
// root the runs on read-only data drop to the user nobody (setpriv), so the
// kernel's own permission check is what the code meets.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <regex>

#include "testing/run_tripod.h"
#include "unit/data/test_util.h"

namespace tripod::data {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::vector<std::string> files_in(const std::string& dir, const std::string& ending) {
  std::vector<std::string> r;
  if (!fs::is_directory(dir)) return r;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.size() >= ending.size() && n.compare(n.size() - ending.size(), ending.size(), ending) == 0) r.push_back(n);
  }
  std::sort(r.begin(), r.end());
  return r;
}

// "lm loss: X" of every logged iteration and "lm loss value: X" of each validation.
std::vector<std::string> losses(const std::string& log) {
  std::vector<std::string> r;
  static const std::regex re("lm loss(?: value)?: ([0-9.E+-]+)");
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it) r.push_back((*it)[1]);
  return r;
}

class DataCacheCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::getenv("TRIPOD_BIN")) GTEST_SKIP() << "TRIPOD_BIN is not set (run through ctest)";
    // Every user may enter the test folder (nobody runs the read-only cases).
    ::chmod(dir_.path().c_str(), 0755);
    fs::create_directories(dir_ / "data");
    std::vector<std::vector<int32_t>> docs;
    for (int d = 0; d < 40; ++d) {
      docs.emplace_back();
      for (int k = 0; k < 5 + d % 7; ++k) docs.back().push_back((d * 31 + k * 7) % 500);
    }
    testing::write_docs(dir_ / "data/corpus", docs);
  }
  std::string train(const std::string& extra) const {
    return fmt::format("train --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 "
                       "--micro-batch-size 2 --train-iters 3 --lr 1e-2 --log-interval 1 --eval-iters 1 "
                       "--eval-interval 3 --vocab-size 512 --data-path {} {}",
                       dir_ / "data/corpus", extra);
  }
  // As a user whom the mode bits stop: nobody when this runs as root.
  ::tripod::testing::TripodRun run_restricted(const std::string& args, const std::string& env) const {
    if (::geteuid() != 0) return ::tripod::testing::run_tripod(args, env);
    return ::tripod::testing::run_tripod(args, "setpriv --reuid=65534 --regid=65534 --clear-groups env " + env);
  }
  TempDir dir_;
};

TEST_F(DataCacheCli, ReadOnlyDataTrainsWithItsCachesInAPerUserFolder) {
  if (::geteuid() == 0 && std::system("command -v setpriv >/dev/null") != 0)
    GTEST_SKIP() << "running as root without setpriv (util-linux): cannot make a folder read-only to this test";
  // Writable data: the caches go beside it, as before.
  const auto writable = ::tripod::testing::run_tripod(train(""));
  ASSERT_EQ(writable.code, 0) << writable.output;
  const auto beside = files_in(dir_ / "data", ".tripod-index");
  ASSERT_EQ(beside.size(), 2u) << writable.output;  // train and valid
  EXPECT_EQ(files_in(dir_ / "data", ".tripod-maxid"), std::vector<std::string>{"corpus.tripod-maxid"});
  for (const auto& f : beside) fs::remove(dir_ / ("data/" + f));
  fs::remove(dir_ / "data/corpus.tripod-maxid");

  // The same data, read-only: the caches go to $XDG_CACHE_HOME/tripod/index-cache, with a log line.
  fs::create_directories(dir_ / "home");
  ::chmod((dir_ / "home").c_str(), 0777);
  ::chmod((dir_ / "data").c_str(), 0555);
  const std::string env = "XDG_CACHE_HOME=" + dir_ / "home";
  const auto ro = run_restricted(train(""), env);
  ASSERT_EQ(ro.code, 0) << ro.output;
  EXPECT_NE(ro.output.find(fmt::format("data: the data's folder {} is not writable (Permission denied): index caches "
                                       "go to {}/tripod/index-cache",
                                       dir_ / "data", dir_ / "home")),
            std::string::npos) << ro.output;
  const std::string user = dir_ / "home/tripod/index-cache";
  EXPECT_EQ(files_in(user, ".tripod-index"), beside);  // the same names, in the other folder
  EXPECT_EQ(files_in(user, ".tripod-maxid").size(), 1u);
  EXPECT_TRUE(files_in(dir_ / "data", ".tripod-index").empty());
  EXPECT_EQ(losses(ro.output), losses(writable.output));
  ASSERT_EQ(losses(ro.output).size(), 4u) << ro.output;  // 3 iterations and the validation

  // The next run reads them: same files, untouched.
  const auto before = fs::last_write_time(user + "/" + beside[0]);
  const auto again = run_restricted(train(""), env);
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_EQ(fs::last_write_time(user + "/" + beside[0]), before);
  EXPECT_EQ(losses(again.output), losses(writable.output));

  // An unwritable --data-cache-path stops before training, naming it.
  const auto bad = run_restricted(train("--data-cache-path " + dir_ / "data/cache"), env);
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--data-cache-path " + dir_ / "data/cache" + ": cannot write index caches there: "
                            "Permission denied"),
            std::string::npos) << bad.output;
  ::chmod((dir_ / "data").c_str(), 0755);
}

TEST_F(DataCacheCli, DataCachePathHoldsTheCaches) {
  const auto beside = ::tripod::testing::run_tripod(train(""));
  ASSERT_EQ(beside.code, 0) << beside.output;
  const auto names = files_in(dir_ / "data", ".tripod-index");
  ASSERT_EQ(names.size(), 2u);
  // Megatron's flag: the folder is created, the caches are written there and nothing beside the data.
  for (const auto& f : names) fs::remove(dir_ / ("data/" + f));
  fs::remove(dir_ / "data/corpus.tripod-maxid");
  const auto r = ::tripod::testing::run_tripod(train("--data-cache-path " + dir_ / "cache/idx"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(files_in(dir_ / "cache/idx", ".tripod-index"), names);
  EXPECT_EQ(files_in(dir_ / "cache/idx", ".tripod-maxid").size(), 1u);
  EXPECT_TRUE(files_in(dir_ / "data", ".tripod-index").empty());
  EXPECT_TRUE(files_in(dir_ / "data", ".tripod-maxid").empty());
  EXPECT_EQ(losses(r.output), losses(beside.output));
  EXPECT_EQ(r.output.find("not writable"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tripod::data
