// Implementation of train/output_checks.h.
#include "train/output_checks.h"

#include <algorithm>
#include <filesystem>
#include <thread>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/log.h"
#include "ckpt/atomic_io.h"
#include "ckpt/sharded_checkpoint.h"

namespace tripod::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

bool same_folder(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

// This rank's checks; the lock is rank 0's.
void check_this_rank(const TrainArgs& args, int rank, int world_size, const std::string& job,
                     std::unique_ptr<ckpt::SaveDirLock>* lock) {
  const auto& ck = args.checkpoint;
  if (!ck.save.empty()) {
    if (rank == 0) {
      *lock = ckpt::SaveDirLock::acquire(ck.save, job);
      check_save_dir_is_this_runs(ck);
    } else {
      ckpt::check_writable_dir("--save", ck.save);
    }
  }
  if (rank == world_size - 1) {  // the logger (Trainer::is_logger) writes the metrics
    if (!args.logging.metrics_file.empty()) ckpt::check_appendable_file("--metrics-file", args.logging.metrics_file);
    if (!args.logging.tensorboard_dir.empty())
      ckpt::check_writable_dir("--tensorboard-dir", args.logging.tensorboard_dir);
  }
}

}  // namespace

void check_save_dir_is_this_runs(const CheckpointArgs& ck, const std::string& who) {
  const auto iters = ckpt::committed_iterations(ck.save);
  if (iters.empty()) return;
  if (!ck.load.empty() && same_folder(ck.load, ck.save)) return;  // resuming from them
  std::string have;
  for (size_t i = 0; i < iters.size(); ++i) {
    if (iters.size() > 6 && i == 3) {
      have += ", ...";
      i = iters.size() - 3;
    }
    have += (have.empty() ? "" : ", ") + std::to_string(iters[i]);
  }
  int64_t latest = -1;
  try {
    latest = ckpt::read_latest_iteration(ck.save);
  } catch (const Error&) {
  }
  const std::string marker = latest >= 0 ? fmt::format("; latest {}", latest) : "";
  if (ck.save_into_existing) {
    log::info("--save {} holds checkpoints of another run (iterations {}{}); saving beside them "
              "(--save-into-existing): {}'s saves replace the latest marker, and --save-retain removes only "
              "{}'s", ck.save, have, marker, who, who);
    return;
  }
  const std::string why = who != "this run" ? std::string("it starts a new checkpoint history")
                          : ck.load.empty() ? std::string("there is no --load")
                                          : fmt::format("--load names another folder, {}", ck.load);
  throw Error(fmt::format("--save {} already holds checkpoints of another run (iterations {}{}) and {} does not "
                          "resume from them ({}): its saves would move the latest marker back and mix the two "
                          "runs' checkpoints", ck.save, have, marker, who, why),
              who != "this run" ? std::string("pass another --save folder, or --save-into-existing to write beside them")
                                : fmt::format("resume from them with --load {}, pass another --save folder, or pass "
                                              "--save-into-existing to save beside them", ck.save));
}

std::unique_ptr<ckpt::SaveDirLock> check_run_outputs(const TrainArgs& args, int rank, int world_size,
                                                     comm::Store* store, std::chrono::milliseconds timeout,
                                                     const std::string& job) {
  std::unique_ptr<ckpt::SaveDirLock> lock;
  if (!store || world_size == 1) {
    check_this_rank(args, rank, world_size, job, &lock);
    return lock;
  }
  json mine = json::object();
  try {
    check_this_rank(args, rank, world_size, job, &lock);
  } catch (const Error& e) {
    mine = {{"message", e.message()}, {"hint", e.hint()}};
  }
  store->set_str("startup/outputs/" + std::to_string(rank), mine.dump());
  json failed;
  int failed_rank = -1;
  for (int r = 0; r < world_size; ++r) {
    const json theirs = json::parse(store->get_str("startup/outputs/" + std::to_string(r), timeout), nullptr, false);
    if (failed_rank < 0 && theirs.is_object() && theirs.contains("message")) failed = theirs, failed_rank = r;
  }
  // Rank 0 hosts the store: it stays until every rank has read every result
  // (bounded), so that none of them reports a lost store instead of the failure.
  const int64_t read = store->add("startup/outputs/read", 1);
  if (failed_rank >= 0 && rank == 0 && read < world_size) {
    const auto until = std::chrono::steady_clock::now() + std::min<std::chrono::milliseconds>(timeout,
                                                                                             std::chrono::seconds(30));
    while (std::chrono::steady_clock::now() < until && store->add("startup/outputs/read", 0) < world_size)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (failed_rank >= 0)
    throw Error(failed_rank == rank ? failed["message"].get<std::string>()
                                    : fmt::format("rank {}: {}", failed_rank, failed["message"].get<std::string>()),
                failed.value("hint", std::string()));
  return lock;
}

}  // namespace tripod::train
