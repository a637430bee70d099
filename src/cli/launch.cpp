// `tripod launch`: the flags of the process supervisor (launch/launch.h),
// which starts N local ranks of `tripod SUBCOMMAND ARGS...` as torchrun does
// for one node. Flags only.
#include <CLI/CLI.hpp>

#include "cli/command.h"
#include "launch/launch.h"

namespace tripod::cli {
namespace {

int run_launch(int argc, char** argv) {
  launch::LaunchOptions a;
  CLI::App app{"Start N local ranks of `tripod SUBCOMMAND ARGS...` (one node of a job)", "tripod launch"};
  app.prefix_command();
  app.footer(
      "\nEverything after the options is the command each rank runs (tripod's own subcommand):\n"
      "  tripod launch --nproc-per-node 8 train --tensor-model-parallel-size 2 ...\n"
      "Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and\n"
      "TRIPOD_JOB_TOKEN (export one TRIPOD_JOB_TOKEN on every node of a multi-node job).\n"
      "Output lines are prefixed [rank N]; when a rank fails the others are stopped and the\n"
      "launcher exits with its code. See docs/distributed.md.");
  app.add_option("--nproc-per-node,--nproc_per_node", a.nproc_per_node, "ranks to start on this node")->required();
  app.add_option("--nnodes", a.nnodes, "nodes in the job")->capture_default_str();
  app.add_option("--node-rank,--node_rank", a.node_rank, "this node's index, 0..nnodes-1")->capture_default_str();
  app.add_option("--master-addr,--master_addr", a.master_addr, "address of node 0 (hosts the store)")
      ->capture_default_str();
  app.add_option("--master-port,--master_port", a.master_port,
                 "store port on node 0 (default: a free port on one node, else 29500)");
  app.add_option("--kill-grace", a.kill_grace_s, "seconds between SIGTERM and SIGKILL when stopping ranks")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  a.command = app.remaining();
  if (!a.command.empty() && a.command.front() == "--") a.command.erase(a.command.begin());
  return launch::launch(std::move(a));
}

}  // namespace
}  // namespace tripod::cli

TRIPOD_REGISTER_COMMAND(launch, "launch", "start N local ranks of a tripod command (like torchrun)",
                        tripod::cli::run_launch);
