// Runs the real tripod executable ($TRIPOD_BIN, set by tripod_add_test) the
// way a user does, through the shell, and captures its exit code and output
// (stdout and stderr together), for tests that drive the CLI.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tripod::testing {

struct TripodRun {
  int code = -1;  // exit status, -1 when killed by a signal
  std::string output;
};

// `ENV $TRIPOD_BIN ARGS 2>&1`; env: "VAR=value ..." or empty.
inline TripodRun run_tripod(const std::string& args, const std::string& env = "") {
  const char* bin = std::getenv("TRIPOD_BIN");
  const std::string cmd = (env.empty() ? "" : env + " ") + std::string(bin ? bin : "tripod") + " " + args + " 2>&1";
  TripodRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  while (fgets(buf.data(), buf.size(), p)) r.output += buf.data();
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace tripod::testing
