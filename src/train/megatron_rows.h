// The rows of the Megatron-LM flags tripod does not implement, in two lists
// (megatron_rows.cpp, megatron_rows_rejected.cpp); flag_table() adds them
// after tripod's own rows.
#pragma once

#include <span>

#include "train/flag_table.h"

namespace tripod::train {

struct MegatronRow {
  const char* name;
  FlagTakes takes;
  FlagStatus status;
  const char* note;
  const char* feature = "";  // planned rows
};

std::span<const MegatronRow> megatron_accepted_planned_rows();
std::span<const MegatronRow> megatron_rejected_rows();

}  // namespace tripod::train
