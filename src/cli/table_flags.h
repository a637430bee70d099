// The flags of the flag table (train/flag_table.h) on a CLI11 command line:
// `tripod train` and `tripod doctor -- FLAGS` take the train rows (with
// every Megatron-LM flag tripod does not implement, hidden from --help),
// `tripod plan` the model rows. As argparse in Megatron, a repeated flag
// takes its last value, so a launch script can override a default set
// earlier on the line. Unknown flags fail with the closest known names
// (edit distance).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "train/flag_table.h"

namespace tripod::cli {

class TableFlags {
 public:
  // Registers the rows `command` takes, bound into `args`. For kTrain also
  // the Megatron rows it does not implement, and the parser keeps unknown
  // arguments for apply().
  void add_to(CLI::App& app, train::FlagCommand command, train::TrainArgs& args);
  // After parsing (kTrain): an Error naming unknown flags and their closest
  // known names; one Error naming every planned or rejected flag given; one
  // log note per accepted flag given (when log_notes: rank 0 only).
  void apply(const CLI::App& app, bool log_notes) const;
  // The same, recording the problems (unknown flags, Megatron flags tripod
  // does not take) into `problems` instead of throwing.
  void apply(const CLI::App& app, bool log_notes, ErrorList& problems) const;

 private:
  std::vector<std::pair<const train::FlagRow*, CLI::Option*>> megatron_;
  std::vector<std::string> values_;              // sinks of the Megatron value flags
  std::vector<std::vector<std::string>> lists_;  // and of the list flags
};

// A CLI11 check that refuses NaN and infinities ("nan", "inf", "1e999"):
// every float flag of the table has it; other commands' float flags use it too.
CLI::Validator finite_number();

// The up to `n` names of `known` closest to `unknown` (edit distance).
std::vector<std::string> closest_flags(const std::string& unknown, const std::vector<std::string>& known,
                                       size_t n = 3);

}  // namespace tripod::cli
