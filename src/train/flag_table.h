// The one table of `tripod train` flags and of every Megatron-LM flag.
//
// A row is a flag: its name, the TrainArgs member it sets, its help, whether
// every rank must be started with the same value (NOTE [Args agreement]),
// its Megatron-LM status and the commands that take it. From the rows come
// the registration of `tripod train`, `tripod plan` and `tripod doctor --`
// flags (cli/table_flags.h), the cross-rank agreement (train/args_agreement.h)
// and docs/megatron-flags.md (flag_docs_markdown()).
//
// Megatron-LM's flags (megatron/training/arguments.py and the flags its
// config dataclasses generate, at the commit kMegatronCommit) all have a row:
// implemented, accepted as meaningless here (with why), planned (with the
// feature: fp8, moe, context parallel, fsdp/zero) or rejected (with why and
// what to use). tests/cli/data/megatron_lm_d98e8a6_flags.txt lists them and
// tests/cli/test_flag_table.cpp checks that every one has a row. A new
// option is one row here and its member.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "train/train_args.h"

namespace tripod::train {

inline constexpr const char* kMegatronCommit = "d98e8a64ddf34856e74b24714e3bedb2f5a39553";

enum class FlagTakes : uint8_t { None, Value, List };

enum class FlagStatus : uint8_t {
  Implemented,  // a Megatron-LM flag that works as in Megatron
  TripodOnly,   // tripod's own flag
  Accepted,     // Megatron's, with no meaning here: parses, rank 0 logs the note
  Planned,      // Megatron's, for a feature tripod will have: stops naming the feature
  Rejected,     // Megatron's, not taken: stops with why and what to use
};

// Which commands take the flag (`tripod doctor -- FLAGS` takes train's).
enum FlagCommand : uint8_t { kTrain = 1, kPlan = 2 };

using FlagRef = std::variant<bool*, int*, int64_t*, uint64_t*, float*, double*, std::string*,
                             std::vector<std::string>*>;

struct FlagRow {
  const char* name = "";
  FlagTakes takes = FlagTakes::None;
  FlagStatus status = FlagStatus::Implemented;
  // Implemented, tripod-only: the help. Accepted: why it has no meaning.
  // Planned: the feature and what to do meanwhile. Rejected: why and what to use.
  const char* text = "";
  // The member the flag sets (implemented and tripod-only rows; null for the
  // flags the command line itself handles, --help and --config).
  FlagRef (*member)(TrainArgs&) = nullptr;
  // Must be equal on every rank; agreed_value overrides the member's spelling.
  bool agree = false;
  std::string (*agreed_value)(const TrainArgs&) = nullptr;
  uint8_t commands = kTrain;
  bool show_default = false;  // --help prints the default
  bool required = false;      // `tripod train` needs it
  bool hidden = false;        // a testing aid: not in --help or the docs
  const char* feature = "";   // planned rows: fp8 | moe | context parallel | fsdp/zero
  const char* default_text = nullptr;  // --help's default when the member's is a "not given" marker

  // Builders, for the declarative lists in flag_table.cpp.
  FlagRow& agreed() { agree = true; return *this; }
  FlagRow& agreed(std::string (*v)(const TrainArgs&)) { agree = true; agreed_value = v; return *this; }
  FlagRow& plan() { commands |= kPlan; return *this; }
  FlagRow& defaulted() { show_default = true; return *this; }
  FlagRow& needed() { required = true; return *this; }
  FlagRow& testing_aid() { hidden = true; return *this; }
  FlagRow& shows(const char* d) { default_text = d; return *this; }
  bool bound() const { return member != nullptr; }
  bool megatron() const { return status != FlagStatus::TripodOnly; }
};

// Every row: tripod's flags first (in --help order), then the Megatron-LM
// flags tripod does not implement, each name once.
const std::vector<FlagRow>& flag_table();
const FlagRow* find_flag(const std::string& name);

// The row's value in `a` as the agreement and the docs spell it: numbers as
// fmt prints them, on/off, strings, lists joined by spaces.
std::string flag_value(const FlagRow& row, const TrainArgs& a);

const char* to_string(FlagTakes t);
const char* to_string(FlagStatus s);

// docs/megatron-flags.md, generated from the table (`tripod train
// --flags-markdown`; tests/cli/test_flag_table.cpp compares).
std::string flag_docs_markdown();

}  // namespace tripod::train
