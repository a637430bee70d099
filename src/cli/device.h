// Backend selection for subcommands: "cpu" or "cuda" (when built with CUDA).
#pragma once

#include <memory>
#include <string>

#include "backend/ops.h"

namespace tripod::cli {

std::unique_ptr<backend::Backend> make_backend(const std::string& device, int local_rank = 0);

}  // namespace tripod::cli
