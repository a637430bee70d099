// File operations for checkpoints: durable writes (fsync of the file and of
// its directory), renames, and the failure-injection points the atomic
// commit is tested with.
//
// NOTE [Failure injection]
// Every file operation of a save (create+write+fsync of a file, a rename, a
// directory fsync, a removal) first calls fault_point(). With the
// environment variable TRIPOD_CKPT_FAIL_AT=n set (base/debug_config.h; a
// test that sets it in-process calls reload_debug_config()), the n-th call since
// reset_fault_points() throws a tripod::Error, as a crash at that point
// would stop the save. tests/unit/ckpt/test_atomic_commit.cpp runs a save
// with every n from 1 to the number of operations and checks that the
// previous checkpoint still loads after each one.
// With TRIPOD_CKPT_FAIL_ENOSPC=1 as well, a failing write_file_synced fails
// as a full disk does instead (ENOSPC after half the bytes), through the
// same error path as a real one: the message names the folder and the bytes
// still needed.
#pragma once

#include <cstdint>
#include <string>

namespace tripod::ckpt {

void reset_fault_points();
// Number of fault points passed since the last reset.
int64_t fault_points_passed();
// Counts one operation; throws when it is the TRIPOD_CKPT_FAIL_AT-th.
void fault_point(const std::string& what);

// Writes `bytes` to `path` (truncating), then fsyncs it. One fault point.
void write_file_synced(const std::string& path, const void* bytes, size_t n);
void write_text_synced(const std::string& path, const std::string& text);

// A file of `total` bytes written in pieces (in order, each at its offset)
// and fsynced by finish(): what write_file_synced does without holding the
// whole file in memory. One fault point, as write_file_synced (at the
// constructor; TRIPOD_CKPT_KILL_AT and the full-disk injection act when half
// of `total` is written). finish() checks that `total` bytes were written.
class SyncedFileWriter {
 public:
  SyncedFileWriter(const std::string& path, size_t total);
  ~SyncedFileWriter();
  SyncedFileWriter(const SyncedFileWriter&) = delete;
  SyncedFileWriter& operator=(const SyncedFileWriter&) = delete;
  void write_at(uint64_t offset, const void* bytes, size_t n);
  // Writes again over bytes already written (not counted again; a header
  // whose checksums are known only at the end).
  void overwrite_at(uint64_t offset, const void* bytes, size_t n);
  void finish();

 private:
  std::string path_;
  size_t total_ = 0, written_ = 0;
  int fd_ = -1;
  int64_t point_ = 0;
  bool kill_ = false, full_disk_ = false;
};
// fsync of a directory, so that renames and creations in it are durable.
void fsync_dir(const std::string& dir);
// rename(2) (atomic within one file system). One fault point.
void rename_path(const std::string& from, const std::string& to);
// Writes `text` to `path` atomically: path.tmp.<pid>, fsync, rename, fsync dir.
void write_text_atomic(const std::string& path, const std::string& text);
// Whole file as a string; Error naming the file when it cannot be read.
std::string read_text(const std::string& path);

// ---- checks before a run writes (no fault points) ----
// An Error for a failed file-system operation on a path the user gave:
// `flag` and the path, what was tried, errno's text and a fix that fits the
// errno (permissions, a read-only file system, a missing parent, a full disk).
[[noreturn]] void fail_path(const std::string& flag, const std::string& path, const std::string& op, int err);
// Creates `dir` (and its parents) when missing, then creates and removes a
// probe file in it: fail_path() when either cannot be done.
void check_writable_dir(const std::string& flag, const std::string& dir);
// Opens `path` for appending (creating it, as a metrics file is) and closes
// it: fail_path() when it cannot.
void check_appendable_file(const std::string& flag, const std::string& path);

}  // namespace tripod::ckpt
