// The lock a job holds on its --save folder for its lifetime, so that two
// jobs never save into one folder (each would replace the other's
// checkpoints and remove its live iter_N.tmp/ as debris).
//
// NOTE [Save-folder lock]
// DIR/tripod_save.lock holds one JSON line naming the holder: host, pid, the
// process's start time (so a reused pid is not taken for the holder),
// the start of the job in UTC, the job id, and a heartbeat (Unix seconds)
// the holder renews every kHeartbeatSeconds. Taking the lock:
//   1. flock(LOCK_EX | LOCK_NB) on the file. Held by a live process on a
//      file system where flock works (local disks; NFS v4 and recent v3
//      clients, which map it onto the server's byte-range locks): refused.
//      Not supported (Lustre mounted without -o flock, some FUSE file
//      systems): the recorded holder alone decides, with a log line.
//   2. The recorded holder, when the file names one: on this host it is
//      alive when its pid runs and started at the recorded time (refused),
//      else it is taken over with a log line. On another host its liveness
//      is its heartbeat: older than kStaleSeconds is taken over with a log
//      line; a fresh one is watched for up to two heartbeats, and refused
//      when it moves (a clock skew between hosts only delays a takeover).
// Releasing empties the file (no holder) and unlocks it; a killed holder
// leaves its record, which the next job takes over as above.
//
// What holds where: on one host, always (flock, then pid and start time).
// Across hosts on a shared file system, two live jobs are refused when
// flock works across clients (NFS with a lock manager, Lustre with -o flock)
// and, where it does not, by the heartbeat: only two jobs started within
// the same few seconds on different hosts can both pass. docs/checkpoints.md
// says the same for users.
#pragma once

#include <memory>
#include <string>

namespace tripod::ckpt {

constexpr const char* kSaveLockFile = "tripod_save.lock";
constexpr int kHeartbeatSeconds = 10;
constexpr int kStaleSeconds = 60;

class SaveDirLock {
 public:
  // Creates `save_dir` when missing and takes its lock for this process.
  // `job` names the job in the record (a Slurm job id, a launcher's token).
  // Errors: the folder cannot be created or written (the path, the errno
  // text and the fix), or another live job holds it (its host, pid, start
  // and job). `flag` is how the folder was given ("--save").
  static std::unique_ptr<SaveDirLock> acquire(const std::string& save_dir, const std::string& job,
                                              const std::string& flag = "--save");
  ~SaveDirLock();
  SaveDirLock(const SaveDirLock&) = delete;
  SaveDirLock& operator=(const SaveDirLock&) = delete;
  const std::string& path() const;

  struct Impl;

 private:
  explicit SaveDirLock(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tripod::ckpt
