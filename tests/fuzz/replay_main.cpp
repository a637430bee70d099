// main() of the fuzz_<target>_replay tests (any compiler, default suite):
// writes the target's seeds (from the real writers) into a scratch folder and
// runs LLVMFuzzerTestOneInput on each, then on every file of the regression
// folders given on the command line (tests/fuzz/regressions/<target>/: the
// inputs that once crashed a reader). A crash, sanitizer report or escaping
// exception fails the test, as does a "valid-*" seed that the reader rejects.
//
//   fuzz_idx_replay <target> <source dir> [folder or file...]
//   fuzz_idx_replay --write-seeds <target> <dir> <source dir>   (for run_fuzzer.sh)
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace fs = std::filesystem;

static std::vector<fs::path> files_of(const fs::path& p) {
  std::vector<fs::path> out;
  if (fs::is_directory(p)) {
    for (const auto& e : fs::directory_iterator(p))
      if (e.is_regular_file()) out.push_back(e.path());
  } else if (fs::exists(p)) {
    out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  return out;
}

static bool replay(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const int64_t before = tripod::fuzz::g_rejected;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return tripod::fuzz::g_rejected == before;
}

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--write-seeds") {
    tripod::fuzz::write_seeds(argv[2], argv[3], argv[4]);
    return 0;
  }
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <target> <source dir> [regression folder or file...]\n", argv[0]);
    return 2;
  }
  const std::string seeds = tripod::fuzz::scratch_dir() + "/seeds";
  fs::create_directories(seeds);
  tripod::fuzz::write_seeds(argv[1], seeds, argv[2]);
  int n_seeds = 0, n_valid = 0, n_regressions = 0, failures = 0;
  for (const auto& f : files_of(seeds)) {
    const bool accepted = replay(f);
    ++n_seeds;
    if (f.filename().string().rfind("valid-", 0) == 0) {
      ++n_valid;
      if (!accepted) {
        std::fprintf(stderr, "FAIL: seed %s (a file from the real writer) was rejected\n", f.filename().c_str());
        ++failures;
      }
    }
  }
  for (int i = 3; i < argc; ++i)
    for (const auto& f : files_of(argv[i])) {
      replay(f);
      ++n_regressions;
    }
  std::printf("%s: %d seeds (%d valid, all accepted: %s), %d regression inputs, %lld rejected with a tripod "
              "error, none crashed\n",
              argv[1], n_seeds, n_valid, failures ? "no" : "yes", n_regressions,
              static_cast<long long>(tripod::fuzz::g_rejected));
  if (n_valid == 0) {
    std::fprintf(stderr, "FAIL: no valid seed was written for %s\n", argv[1]);
    return 1;
  }
  return failures ? 1 : 0;
}
