// The rank layout lives in config/layout.h (pure rank arithmetic, shared
// with the planner); parallel/ names it as its users always have.
#pragma once

#include "config/layout.h"

namespace tripod::parallel {

using config::Layout;
using config::masked_rank_groups;
using config::RankGroups;

}  // namespace tripod::parallel
