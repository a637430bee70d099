// Subcommand registry. Each cli/<name>.cpp defines one subcommand and
// registers it with a file-scope TRIPOD_REGISTER_COMMAND; main.cpp looks the
// name up. A subcommand parses its own flags (Megatron names), builds the
// objects of the modules below and runs them: no logic of its own.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace tripod::cli {

// argv[0] is "tripod <name>"; returns the process exit code.
using CommandFn = std::function<int(int argc, char** argv)>;

struct Command {
  std::string name;
  std::string summary;  // one line for `tripod --help`
  CommandFn run;
};

bool register_command(Command command);
const std::vector<Command>& commands();

}  // namespace tripod::cli

#define TRIPOD_REGISTER_COMMAND(ident, name, summary, fn) \
  static const bool tripod_command_registered_##ident =   \
      ::tripod::cli::register_command({name, summary, fn})
