// Flag files: `tripod train --config run.conf` reads flags from a file, one
// or more per line, as a launch script would pass them:
//
//   # GPT-2 350M on 8 GPUs
//   --num-layers 24 --hidden-size 1024 --num-attention-heads 16
//   --data-path ${DATA_ROOT}/owt_text_document
//   --save ${CHECKPOINT_ROOT:-/tmp/ckpt}/gpt350m
//
// '#' starts a comment; words split on whitespace; "double" or 'single'
// quotes keep spaces. ${VAR} is replaced by the environment variable (an
// unset one is an error naming the file, line and variable), ${VAR:-default}
// falls back to the default. The flags are inserted where --config stands,
// so flags after it on the command line override the file (the last value
// of a repeated flag wins).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tripod::config {

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// Words of a flag file's text; `where` names the file in errors.
std::vector<std::string> parse_flags(const std::string& text, const std::string& where, const EnvLookup& env);
std::vector<std::string> read_flag_file(const std::string& path);  // with the process environment

// argv with every `--config FILE` (or --config=FILE) replaced by the file's flags.
std::vector<std::string> expand_config_args(int argc, char** argv);

}  // namespace tripod::config
