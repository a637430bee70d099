// tripod: entry point. Dispatches to a subcommand and is the only place that
// turns a tripod::Error into a message and an exit code (style.md).
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>

#include "base/env.h"
#include "base/error.h"
#include "cli/command.h"

namespace tripod::cli {

std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}
bool register_command(Command command) {
  registry().push_back(std::move(command));
  return true;
}
const std::vector<Command>& commands() { return registry(); }

static void print_usage() {
  std::printf("tripod: train GPT models with tensor, pipeline and data parallelism.\n\n");
  std::printf("usage: tripod <command> [flags]    (tripod <command> --help for its flags)\n\n");
  auto cmds = commands();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return a.name < b.name; });
  for (const auto& c : cmds) std::printf("  %-12s %s\n", c.name.c_str(), c.summary.c_str());
  std::printf("\nDocs: README.md and docs/ in the source tree.\n");
}

}  // namespace tripod::cli

int main(int argc, char** argv) {
  using namespace tripod::cli;
  // A write to a socket whose peer is gone (Gloo's writev to a rank that
  // exited) must fail with EPIPE and be reported, not kill this rank
  // silently with SIGPIPE (exit 141) so that the survivors blame it; Python
  // ignores SIGPIPE for the same reason. tripod launch's ranks inherit it.
  ::signal(SIGPIPE, SIG_IGN);
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    print_usage();
    return argc < 2 ? 1 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("tripod 0.1.0\n");
    return 0;
  }
  const std::string name = argv[1];
  for (const auto& c : commands()) {
    if (c.name != name) continue;
    std::string prog = "tripod " + name;
    argv[1] = prog.data();
    try {
      return c.run(argc - 1, argv + 1);
    } catch (const tripod::Error& e) {
      std::fprintf(stderr, "tripod %s: error: %s\n", name.c_str(), e.message().c_str());
      if (!e.hint().empty()) std::fprintf(stderr, "  hint: %s\n", e.hint().c_str());
      // Where the check is: for an error without a fix (an invariant: an
      // internal error worth reporting), or for every error with
      // TRIPOD_ERROR_SOURCE=1; a user-facing error names its fix instead.
      if (!e.where().empty() && (e.hint().empty() || tripod::env::get_int_or("TRIPOD_ERROR_SOURCE", 0) != 0))
        std::fprintf(stderr, "  (raised at %s)\n", e.where().c_str());
      return dynamic_cast<const tripod::TimeoutError*>(&e) ? 124 : 2;
    } catch (const std::filesystem::filesystem_error& e) {
      // A file-system call on a path the user gave (permissions, a read-only
      // or full disk): the user's to fix, never an internal error.
      std::string paths = e.path1().string();
      if (!e.path2().empty()) paths += " -> " + e.path2().string();
      std::fprintf(stderr, "tripod %s: error: cannot access %s: %s\n", name.c_str(), paths.c_str(),
                   e.code().message().c_str());
      std::fprintf(stderr, "  hint: check that path: its permissions (ls -ld), that its file system is writable "
                   "and has free space (df -h); %s\n", e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tripod %s: internal error: %s\n", name.c_str(), e.what());
      return 3;
    }
  }
  std::fprintf(stderr, "tripod: unknown command '%s'\n\n", name.c_str());
  print_usage();
  return 1;
}
