// Temporary files of this process, and those that earlier processes left.
//
// NOTE [Temporaries]
// Writers put their output under a temporary name ("<final>.tmp-<pid>-<hex>")
// and rename it into place at the end. Three things remove the temporary when
// the rename is not reached:
//   - the writer itself on every error path (destructors, catch blocks);
//   - SIGTERM / SIGINT / SIGHUP: a handler installed by remove_temporaries_on_signal()
//     unlinks every registered name (unlink is async-signal-safe), then dies of
//     the signal as it would have;
//   - SIGKILL cannot be caught: the next run finds the names in the target
//     folder whose owner pid is no longer alive (remove_stale_temporaries) and
//     removes them with a log line. Pids are of this host: a folder shared by
//     several hosts keeps another host's files when that pid is alive here.
#pragma once

#include <cstdint>
#include <string>

namespace tripod {

// "<path>.tmp-<pid>-<8 hex digits>": the name a temporary of `path` gets.
std::string temporary_name(const std::string& path);

// Registers `path` for removal on a terminating signal; returns a slot for
// unregister_temporary (-1 when all slots are taken: the file is then only
// removed by the next run). Thread-safe.
int register_temporary(const std::string& path);
void unregister_temporary(int slot);

// Installs the handler for SIGTERM, SIGINT and SIGHUP (idempotent).
void remove_temporaries_on_signal();

// True when a process with this pid exists (kill(pid, 0)).
bool pid_alive(int64_t pid);

// Removes the files in `dir` named "*.tmp-<pid>-<8 hex>" whose pid is dead
// and that were last written at least `min_age_s` seconds ago (for folders
// that processes of other hosts may be writing to), logging each with its
// size. Returns how many were removed.
int remove_stale_temporaries(const std::string& dir, int64_t min_age_s = 0);

}  // namespace tripod
