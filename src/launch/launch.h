// The process supervisor behind `tripod launch`: starts one node's ranks of
// a tripod command, as torchrun does for one node.
//
// What launch() guarantees:
//   - every rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//     GROUP_RANK, MASTER_ADDR, MASTER_PORT, TRIPOD_LAUNCHER and (unless it
//     is left to the ranks, see NOTE [Job token] in comm/rendezvous.h)
//     TRIPOD_JOB_TOKEN; OMP_NUM_THREADS = cores / ranks unless already set;
//   - every output line of a rank is printed whole, prefixed "[rank N] ",
//     on the stream it was written to (stdout or stderr);
//   - SIGINT / SIGTERM to the launcher are forwarded to every rank's process
//     group (the rank and its children), each time one arrives; the first
//     lets training ranks finish the iteration and save, the second stops
//     them at once, and the launcher SIGKILLs what is left --kill-grace
//     seconds after the second (NOTE [Forwarded signals] in launch.cpp);
//     the exit code is then the ranks' own (128 + the signal when a signal
//     ended them, 0 when they stopped cleanly with --exit-signal-handler);
//   - when a rank fails, the others get SIGTERM twice (100 ms apart, so that
//     ranks that catch it stop at once) and, after kill_grace_s, SIGKILL; the launcher names the failing rank (preferring one a signal
//     from outside killed: its peers' errors are the consequence) and exits
//     with its code;
//   - ranks die with the launcher, even when it is SIGKILLed (PDEATHSIG).
//
// Relates to: cli/launch.cpp (the flags), comm/rendezvous.h (reads the
// variables set here), docs/distributed.md (multi-node use).
#pragma once

#include <string>
#include <vector>

namespace tripod::launch {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;        // 0: $MASTER_PORT, else a free port on one node, else 29500
  double kill_grace_s = 3.0;  // between SIGTERM and SIGKILL when stopping ranks
  std::vector<std::string> command;  // the tripod subcommand and its arguments
};

// Checks the options (errors name the flag), starts the ranks of this node
// running this executable with `command`, supervises them until all exit
// and returns the launcher's exit code (0, the failing rank's code, or
// the ranks' code after a forwarded signal).
int launch(LaunchOptions options);

}  // namespace tripod::launch
