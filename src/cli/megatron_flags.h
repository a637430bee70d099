// Megatron-LM's GPT pretraining flags that tripod does not implement, each
// with its answer: accepted because it has no meaning here (one log note
// when given), or rejected with why and what to use instead. Flags tripod
// implements are ordinary options of `tripod train` (cli/train.cpp).
// docs/megatron-flags.md lists all three kinds; tests/cli check that every
// flag in it parses as it says.
//
// Unknown flags fail with the closest known names (edit distance).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

namespace tripod::cli {

enum class FlagTakes { None, Value, List };
enum class FlagAnswer { Accepted, Rejected };

struct CompatFlag {
  const char* name;
  FlagTakes takes;
  FlagAnswer answer;
  const char* note;  // accepted: why it has no meaning; rejected: why, and what instead
};

const std::vector<CompatFlag>& megatron_compat_flags();

class MegatronCompat {
 public:
  // Registers every compat flag on `app` (hidden from --help) and lets the
  // parser keep unknown arguments for check_unknown().
  void add_to(CLI::App& app);
  // After parsing: an Error naming unknown flags and their closest known
  // names; an Error for a rejected flag that was given; one log note per
  // accepted flag that was given (rank 0 only).
  void apply(const CLI::App& app, bool log_notes) const;

 private:
  std::vector<std::pair<const CompatFlag*, CLI::Option*>> options_;
  std::vector<std::string> values_;               // sink for value flags
  std::vector<std::vector<std::string>> lists_;   // sink for list flags
};

// The up to `n` names of `known` closest to `unknown` (edit distance).
std::vector<std::string> closest_flags(const std::string& unknown, const std::vector<std::string>& known,
                                       size_t n = 3);

}  // namespace tripod::cli
