// Stopping a run on SIGTERM or SIGINT (a Slurm preemption, a scheduler's
// stop, Ctrl-C) without losing the work since the last checkpoint.
//
// NOTE [Exit signal]
// The first SIGTERM or SIGINT sets a flag and prints one line; the training
// loop max-reduces the flag over the world at every iteration boundary
// (ranks may get the signal at different iterations, or only some of them
// get it), so every rank stops after the same iteration, saves there with
// --save, and the logging rank prints the signal and the checkpoint. The
// time from the signal to the exit is bounded by the rest of one iteration
// plus one save (each collective under --distributed-timeout-minutes). A
// second signal ends the process at once, by that signal, without a save.
// The exit code is 128 + the signal (as a shell reports a process a signal
// ended), or 0 with --exit-signal-handler (Megatron's behaviour).
// Megatron's DistributedSignalHandler reduces its flag the same way; it
// installs the handler only with --exit-signal-handler, tripod always.
#pragma once

namespace tripod::train {

// Installs the handler for SIGTERM and SIGINT (idempotent).
void install_exit_signal_handler();
// The first signal received since install (SIGTERM, SIGINT), or 0.
int exit_signal_received();
// "SIGTERM", "SIGINT", or "signal N".
const char* signal_name(int sig);

}  // namespace tripod::train
