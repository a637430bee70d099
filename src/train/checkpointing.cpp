// Checkpoint save/load of the trainer's state, on top of ckpt/ (format,
// atomic commit, resharding: see docs/checkpoints.md).
//
// What a checkpoint holds, and why that is enough for an exact resume:
//   weights + AdamW moments + optimizer step count  (tensors, per tp shard)
//   iteration, consumed_samples                     (the data position: the
//       sampler is a pure function of consumed_samples)
//   seed                                             (dropout and every other
//       random draw is a pure function of (seed, iteration, sample index), so
//       the RNG state is the seed plus the iteration)
//   loss-scaler state (fp16: scale, growth and hysteresis trackers) and the
//       count of skipped updates (the lr schedule advances on successful
//       updates only: it is a function of iteration - skipped)
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "base/debug_config.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timer.h"
#include "ckpt/atomic_io.h"
#include "ckpt/reshard.h"
#include "ckpt/sharded_checkpoint.h"
#include "train/checkpoint_args.h"
#include "train/scalar_reduce.h"
#include "train/trainer.h"

namespace tripod::train {
namespace {

using json = nlohmann::json;

// A save gathers and writes at most this many elements of a parameter at a
// time (NOTE [Streamed shard save]): the writer's two piece buffers are 16 MiB
// each at most. TRIPOD_CKPT_SAVE_WINDOW overrides it (tests: pieces that cut
// parameters and shards anywhere).
int64_t save_window() {
  const int64_t n = debug_config().ckpt_save_window;
  return n > 0 ? n : int64_t{1} << 22;
}

bool is_rank0(const parallel::ProcessGroups& g) { return !g.world || g.global_rank == 0; }

// Every rank learns whether all ranks succeeded (a max-reduce of a failure
// flag), so a failed write on one rank fails the save everywhere instead of
// leaving the others in the next barrier until the timeout.
bool all_ok(const parallel::ProcessGroups& g, backend::Backend& be, bool ok) {
  return all_reduce_scalar<int32_t>(g.world.get(), be, ok ? 0 : 1, comm::ReduceOp::Max) == 0;
}

// Runs `step` on this rank, then agrees with every rank on success.
template <typename F>
void collective_step(const parallel::ProcessGroups& g, backend::Backend& be, const char* what, F&& step) {
  std::exception_ptr err;
  try {
    step();
  } catch (...) {
    err = std::current_exception();
  }
  const bool ok = all_ok(g, be, !err);
  if (err) std::rethrow_exception(err);
  if (!ok) {
    // Let the failing rank report first: launchers stop the job at the first
    // rank that exits, and its message is the one that says what went wrong.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    TRIPOD_FAIL("checkpoint {} failed on another rank (see its log)", what);
  }
}

Tensor to_host(backend::Backend& be, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), DType::F32);
  be.copy(h, t);
  be.synchronize();
  return h;
}

}  // namespace

void Trainer::save_checkpoint() {
  namespace fs = std::filesystem;
  ddp_->finish_param_sync();  // --overlap-param-gather: the updated values must have arrived
  Timer timer;
  const std::string& dir = args_.checkpoint.save;
  const bool rank0 = is_rank0(groups_);
  ckpt::reset_fault_points();
  const std::string tmp = ckpt::tmp_dir_for(dir, iteration_);
  try {
    save_checkpoint_steps(tmp);
  } catch (...) {
    // Every rank is past its write (collective_step agreed on the failure):
    // the partial iter_N.tmp/ goes, so that it does not keep a disk full.
    if (rank0) ckpt::discard_save(dir, iteration_);
    throw;
  }
  saved_iterations_.push_back(iteration_);
  if (rank0)
    log::info("saved checkpoint at iteration {} to {} ({:.2f} s)", iteration_,
              (fs::path(dir) / ckpt::iter_dir_name(iteration_)).string(), timer.seconds());
}

void Trainer::save_checkpoint_steps(const std::string& tmp) {
  namespace fs = std::filesystem;
  const std::string& dir = args_.checkpoint.save;
  const bool rank0 = is_rank0(groups_);
  collective_step(groups_, be_, "prepare", [&] { if (rank0) ckpt::prepare_save(dir, iteration_); });
  collective_step(groups_, be_, "write", [&] {
    // dp and cp replicas hold the same shards. Expert parallelism: each rank
    // holds its ep rank's experts, replicated over edp, so the ep ranks of
    // edp rank 0 write them, dp rank 0 into its file with the rest, the
    // others into model_rank_<tp>_<pp>_ep<e> (ckpt/sharded_checkpoint.h).
    const bool dense_writer = dp_rank_ == 0 && cp_rank_ == 0;
    const bool expert_writer = groups_.edp && groups_.edp->rank() == 0 && cp_rank_ == 0;
    const auto writes = [&](const model::Param& p) { return dense_writer || (expert_writer && p.spec.expert >= 0); };
    // Streamed both ways: the file (ckpt::RankFileWriter) is declared first,
    // then written one piece at a time as the distributed optimizer gathers
    // it from the shards (NOTE [Streamed shard save]), so that no rank holds
    // whole parameters or moments. A failed write is kept until the pieces
    // are all sent (the other ranks are inside the same gathers), then thrown.
    std::exception_ptr failed;
    std::unique_ptr<ckpt::RankFileWriter> file;
    const auto attempt = [&](const auto& f) {
      if (failed) return;
      try {
        f();
      } catch (...) {
        failed = std::current_exception();
      }
    };
    if (dense_writer || expert_writer)
      attempt([&] {
        std::vector<ckpt::RankFileWriter::Declared> declared;
        for (size_t c = 0; c < models_.size(); ++c) {
          for (const auto& p : models_[c]->params().params()) {
            const auto& s = p.spec;
            if (!writes(p)) continue;
            for (const char* prefix : {"model.", "optim.exp_avg.", "optim.exp_avg_sq."})
              declared.push_back({prefix + s.name, s.global_shape, s.shard, p.shape});
          }
          if (model::Fp8State* f = models_[c]->fp8_state(); dense_writer && f && f->config().delayed())
            for (auto& [name, t] : f->state_tensors())
              declared.push_back({"fp8." + name, {t.numel()}, model::ShardDim::None, t.shape()});
        }
        file = std::make_unique<ckpt::RankFileWriter>(tmp, tp_rank_, groups_.layout.tp, pp_rank_, declared,
                                                      dense_writer ? 0 : groups_.layout.ep_rank(groups_.global_rank));
      });
    for (size_t c = 0; c < models_.size(); ++c) {
      optimizer_->save_state(static_cast<int>(c), writes, [&](const float* values, int64_t n) {
        attempt([&] { file->write(values, n); });
      }, save_window());
      // FP8 delayed scaling (model/fp8_meta.h): the same on every tp and dp
      // rank after its reductions, so saved as replicated tensors. A run
      // without FP8 writes none (its checkpoint bytes do not change).
      if (model::Fp8State* f = models_[c]->fp8_state(); dense_writer && f && f->config().delayed())
        for (auto& [name, t] : f->state_tensors())
          attempt([&] {
            const Tensor h = to_host(be_, t);
            file->write(h.data<float>(), h.numel());
          });
    }
    if (file) attempt([&] { file->finish(); });
    if (failed) std::rethrow_exception(failed);
  });
  collective_step(groups_, be_, "commit", [&] {
    if (!rank0) return;
    json meta;
    meta["consumed_samples"] = consumed_samples_;
    meta["model"] = ckpt::config_to_json(model().config());
    meta["layout"] = {{"tp", groups_.layout.tp}, {"pp", groups_.layout.pp}, {"dp", groups_.layout.dp},
                      {"sequence_parallel", args_.parallel.sequence_parallel},
                      {"use_distributed_optimizer", args_.parallel.ddp.use_distributed_optimizer},
                      {"virtual_pipeline_size", groups_.layout.vpp}, {"padded_vocab_size", model().padded_vocab()}};
    const optim::AdamWConfig& adam = args_.optimizer.adam;
    meta["optimizer"] = {{"saved", true}, {"type", "adamw"}, {"steps", optimizer_->steps()},
                         {"beta1", adam.beta1}, {"beta2", adam.beta2}, {"eps", adam.eps},
                         {"weight_decay", adam.weight_decay}};
    meta["rng"] = {{"seed", args_.seed}, {"iteration", iteration_}};
    if (scaler_) {
      const LossScaler::State st = scaler_->state();
      meta["loss_scaler"] = {{"scale", st.scale}, {"growth_tracker", st.growth_tracker},
                             {"hysteresis_tracker", st.hysteresis_tracker}, {"skipped_updates", skipped_updates_}};
    } else {
      meta["loss_scaler"] = {{"scale", 1.0}, {"growth_tracker", 0}, {"skipped_updates", skipped_updates_}};
    }
    // Absolute paths, so that `tripod generate` finds the files from any directory.
    auto abs = [](const std::string& f) { return f.empty() ? f : fs::absolute(f).string(); };
    const auto& tok = args_.tokenizer;
    meta["tokenizer"] = {{"tokenizer_type", tok.type}, {"vocab_file", abs(tok.vocab_file)},
                         {"merge_file", abs(tok.merge_file)}, {"tokenizer_model", abs(tok.tokenizer_model)}};
    meta["training"] = {{"micro_batch_size", args_.batch.micro_batch_size},
                        {"global_batch_size", args_.batch.global_batch_size},
                        {"train_iters", args_.batch.train_iters}, {"lr", args_.optimizer.lr.max_lr},
                        {"min_lr", args_.optimizer.lr.min_lr}};
    // NOTE [Whose checkpoints] (ckpt/sharded_checkpoint.h): retention removes only this run's.
    const auto ours = [this](int64_t it) {
      return it <= resumed_upto_ || std::find(saved_iterations_.begin(), saved_iterations_.end(), it) !=
                                        saved_iterations_.end();
    };
    ckpt::commit_save(dir, iteration_, meta, args_.checkpoint.save_retain, ours);
  });
}

// NOTE [Choosing a checkpoint]: --load DIR resumes from the latest
// iteration, --ckpt-step N (Megatron's flag) from iteration N. The chosen
// checkpoint is verified (metadata checksum, every file's size and header
// checksum) before anything is loaded; when it is damaged the error names
// the newest earlier iteration that verifies and the flag that loads it.
static ckpt::CheckpointReader open_verified(const std::string& dir, int64_t step) {
  namespace fs = std::filesystem;
  if (step >= 0) {
    const auto iters = ckpt::committed_iterations(dir);
    std::string have;
    for (int64_t i : iters) have += (have.empty() ? "" : ", ") + std::to_string(i);
    TRIPOD_CHECK_HINT(fs::is_directory(fs::path(dir) / ckpt::iter_dir_name(step)),
                      iters.empty() ? std::string("train with --save first")
                                    : fmt::format("pass one of the saved iterations: {}", have),
                      "--ckpt-step {}: --load {} holds no {}", step, dir, ckpt::iter_dir_name(step));
  }
  int64_t it = step;
  try {
    auto reader = ckpt::CheckpointReader::open(dir, step);
    it = reader.iteration();
    reader.verify();
    return reader;
  } catch (const Error& e) {
    if (it < 0) it = ckpt::read_latest_iteration(dir);
    const int64_t good = it >= 0 ? ckpt::newest_intact_iteration(dir, it) : -1;
    const std::string which = step >= 0 ? fmt::format("iteration {} (--ckpt-step)", it)
                                        : fmt::format("the latest checkpoint, iteration {},", it);
    if (good >= 0)
      throw Error(fmt::format("{} cannot be loaded: {}", which, e.message()),
                  fmt::format("iteration {} is the newest earlier checkpoint that verifies: pass --ckpt-step {} "
                              "to resume from it", good, good));
    throw Error(fmt::format("{} cannot be loaded: {}", which, e.message()),
                fmt::format("{}; no earlier checkpoint in {} verifies either", e.hint().empty() ?
                            "the checkpoint is damaged" : e.hint(), dir));
  }
}

// FP8 delayed scaling's state, when the checkpoint has it (an FP8 run's):
// a run without FP8 ignores it, an FP8 run from a checkpoint without it (or
// with another --fp8-amax-history-len) starts those tensors fresh (scale 1,
// empty history). The cached FP8 weights are cast again from the loaded ones.
void Trainer::load_fp8_state(const ckpt::CheckpointReader& reader) {
  int64_t loaded = 0, fresh = 0;
  for (auto& m : models_) {
    model::Fp8State* f = m->fp8_state();
    if (!f) continue;
    f->invalidate_weights();
    if (!f->config().delayed()) continue;
    for (auto& [name, t] : f->state_tensors()) {
      const std::string key = "fp8." + name;
      if (!reader.has(key) || reader.info(key).global_shape != Shape{t.numel()}) {
        ++fresh;
        continue;
      }
      be_.copy(t, reader.read_full(key));
      ++loaded;
    }
  }
  if (is_logger() && (loaded || fresh))
    log::info("FP8 delayed scaling state: {} tensors loaded, {} fresh (not in the checkpoint)", loaded, fresh);
}

void Trainer::load_checkpoint() {
  Timer timer;
  const auto reader = open_verified(args_.checkpoint.load, args_.checkpoint.ckpt_step);
  const json& meta = reader.metadata();
  {
    namespace fs = std::filesystem;
    std::error_code ec;
    const std::string& save = args_.checkpoint.save;
    if (!save.empty() && fs::exists(save, ec) && fs::equivalent(save, args_.checkpoint.load, ec))
      resumed_upto_ = reader.iteration();  // the folder's checkpoints up to here are this run's history
  }
  const std::string where = reader.path();
  config::GptConfig saved = reader.config();
  saved.finalize();
  check_model_args(model().config(), saved, where, args_.checkpoint.finetune);
  const auto& cfg = model().config();
  if (args_.parallel.ddp.shards_params()) {  // ZeRO-3: one parameter at a time into this rank's shard
    for (size_t c = 0; c < models_.size(); ++c) {
      auto& buf = ddp_->buffer(static_cast<int>(c));
      const model::ParamStore& store = models_[c]->params();
      buf.fill_shard(buf.value_shard(), [&](const model::Param& p) {
        return ckpt::param_value(reader, store, p, args_.seed, cfg.init_method_std, cfg.num_layers);
      });
    }
  } else {
    for (auto& m : models_) ckpt::load_params(reader, m->params(), args_.seed, cfg.init_method_std, cfg.num_layers);
  }
  load_fp8_state(reader);
  const bool has_optim = meta.contains("optimizer") && meta["optimizer"].value("saved", false);
  if (args_.checkpoint.finetune) {
    iteration_ = 0;
    consumed_samples_ = 0;
  } else {
    iteration_ = reader.iteration();
    consumed_samples_ = meta.value("consumed_samples", int64_t{0});
    if (!args_.checkpoint.no_load_rng && meta.contains("rng")) {  // imported checkpoints have no RNG state
      const uint64_t seed = meta["rng"].value("seed", uint64_t{0});
      TRIPOD_CHECK_HINT(seed == args_.seed, fmt::format("pass --seed {} to continue the same random streams, or "
                        "--no-load-rng to continue with --seed {}", seed, args_.seed),
                        "--seed {} contradicts the checkpoint {} (seed {})", args_.seed, where, seed);
    }
    if (!args_.checkpoint.no_load_optim) {
      TRIPOD_CHECK_HINT(has_optim, "pass --finetune or --no-load-optim to start a fresh optimizer",
                        "{} holds no optimizer state (imported or weights-only)", where);
      const int64_t steps = meta["optimizer"].value("steps", int64_t{0});
      for (size_t c = 0; c < models_.size() && optimizer_->sharded(); ++c) {  // this rank's shard only
        const model::ParamStore& store = models_[c]->params();
        optimizer_->load_state(static_cast<int>(c), [&](const model::Param& p, int k) {
          return ckpt::moment_value(reader, store, p, k);
        }, steps);
      }
      for (size_t c = 0; c < models_.size() && !optimizer_->sharded(); ++c) {
        auto [cur_m, cur_v] = optimizer_->state(static_cast<int>(c));
        Tensor m = Tensor::empty({cur_m.numel()}, DType::F32), v = Tensor::empty({cur_v.numel()}, DType::F32);
        ckpt::load_optimizer_moments(reader, models_[c]->params(), m, v);
        optimizer_->set_state(static_cast<int>(c), m, v, steps);
      }
      // As Megatron, the grad scaler travels with the optimizer state.
      if (meta.contains("loss_scaler")) {
        const json& ls = meta["loss_scaler"];
        skipped_updates_ = ls.value("skipped_updates", int64_t{0});
        if (scaler_ && ls.contains("hysteresis_tracker"))  // saved by an fp16 run
          scaler_->restore({ls.value("scale", 1.0), ls.value("growth_tracker", int64_t{0}),
                            ls.value("hysteresis_tracker", 0)});
      }
    }
  }
  if (is_logger())
    log::info("loaded checkpoint {} (iteration {}, saved at {}) at tp {} pp {} dp {}{}{} ({:.2f} s)", where,
              reader.iteration(), meta.contains("layout") ? meta["layout"].dump() : "?", groups_.layout.tp,
              groups_.layout.pp,
              groups_.layout.dp, args_.checkpoint.finetune ? ", --finetune: weights only, iteration 0" : "",
              args_.checkpoint.no_load_optim && !args_.checkpoint.finetune ? ", --no-load-optim" : "", timer.seconds());
  // A save killed after its commit rename, before the marker moved, leaves a
  // complete newer iteration that the marker does not name (NOTE [Atomic commit]).
  if (is_logger() && args_.checkpoint.ckpt_step < 0) {
    std::string newer;
    for (int64_t it : ckpt::committed_iterations(args_.checkpoint.load))
      if (it > reader.iteration()) newer += (newer.empty() ? "" : ", ") + ckpt::iter_dir_name(it);
    if (!newer.empty())
      log::info("{} also holds {}, newer than iteration {} that {} names (a save killed between its commit and "
                "the marker update, or a run resumed with --ckpt-step); not loaded: --ckpt-step N resumes from one, "
                "and a save of the same iteration replaces it", args_.checkpoint.load, newer, reader.iteration(),
                ckpt::kLatestFile);
  }
}

}  // namespace tripod::train
