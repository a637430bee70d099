// Sharded checkpoints without the trainer: a tiny GPT's parameter table
// saved at tp 2 and loaded at tp 1, 2 and 4 (values and optimizer moments
// against the layout-independent init, padded vocabulary included); the
// atomic commit under an injected failure at every file operation; and
// corrupt metadata, headers, markers and missing files; the streamed rank
// file against write_rank_file byte for byte.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "backend/cpu/cpu_backend.h"
#include "base/debug_config.h"
#include "base/error.h"
#include "ckpt/atomic_io.h"
#include "ckpt/reshard.h"
#include "ckpt/sharded_checkpoint.h"
#include "model/gpt_model.h"
#include "testing/tiny_model.h"

namespace {

namespace fs = std::filesystem;
using namespace tripod;
using namespace tripod::ckpt;

constexpr uint64_t kSeed = 11, kMomentSeed = 99;

config::GptConfig tiny() {
  config::GptConfig c = tripod::testing::tiny_gpt(
      {.num_layers = 1, .hidden_size = 8, .num_attention_heads = 2, .seq_length = 4, .vocab_size = 20});
  c.make_vocab_size_divisible_by = 4;  // Vp: 20 at tp 1, 24 at tp 2, 32 at tp 4
  return c;
}

std::vector<model::ParamSpec> specs(int tp) {
  const auto c = tiny();
  return model::GptModel::all_param_specs(c, c.padded_vocab_size(tp));
}

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("tripod_ck_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

// A save at tp 2: values init_full(spec, kSeed + iteration), both moments init_full(spec, kMomentSeed).
void save_tp2(const fs::path& dir, int64_t iteration, int retain = 0) {
  auto be = backend::make_cpu_backend();
  reset_fault_points();
  const std::string tmp = prepare_save(dir.string(), iteration);
  for (int r = 0; r < 2; ++r) {
    model::ParamStore store(specs(2), 2, r, *be);
    store.init(kSeed + static_cast<uint64_t>(iteration), 0.02f, 1);
    std::vector<ShardTensor> t;
    for (const auto& p : store.params()) {
      t.push_back({"model." + p.spec.name, p.spec.global_shape, p.spec.shard, store.value_to_host(p)});
      Tensor m = model::take_shard(model::init_full(p.spec, kMomentSeed, 1.f, 1), p.spec.shard, 2, r);
      t.push_back({"optim.exp_avg." + p.spec.name, p.spec.global_shape, p.spec.shard, m});
      t.push_back({"optim.exp_avg_sq." + p.spec.name, p.spec.global_shape, p.spec.shard, m});
    }
    write_rank_file(tmp, r, 2, 0, t);
  }
  nlohmann::json meta;
  meta["model"] = config_to_json(tiny());
  meta["consumed_samples"] = 8 * iteration;
  commit_save(dir.string(), iteration, meta, retain);
}

// Loads `dir` at tp and checks every value against init_full at the new
// padded vocab (the init is per element index, so the saved rows and the
// new padding rows both equal it) and the moments (padding rows zero).
void check_load(const fs::path& dir, int tp, int64_t iteration) {
  auto be = backend::make_cpu_backend();
  const auto reader = CheckpointReader::open(dir.string());
  ASSERT_EQ(reader.iteration(), iteration);
  EXPECT_EQ(reader.metadata()["consumed_samples"].get<int64_t>(), 8 * iteration);
  const int64_t vp_saved = tiny().padded_vocab_size(2);
  for (int r = 0; r < tp; ++r) {
    model::ParamStore store(specs(tp), tp, r, *be);
    load_params(reader, store, kSeed + static_cast<uint64_t>(iteration), 0.02f, 1);
    Tensor m = Tensor::empty({store.numel()}, DType::F32), v = Tensor::empty({store.numel()}, DType::F32);
    load_optimizer_moments(reader, store, m, v);
    for (const auto& p : store.params()) {
      Tensor want = model::take_shard(model::init_full(p.spec, kSeed + static_cast<uint64_t>(iteration), 0.02f, 1),
                                      p.spec.shard, tp, r);
      Tensor got = store.value_to_host(p);
      ASSERT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << p.spec.name << " tp " << tp << " rank " << r;
      Tensor mf = model::init_full(p.spec, kMomentSeed, 1.f, 1);
      if (p.spec.name == "embedding.word_embeddings.weight")  // rows past the saved Vp are zero
        for (int64_t i = vp_saved * 8; i < mf.numel(); ++i) mf.data<float>()[i] = 0.f;
      Tensor mw = model::take_shard(mf, p.spec.shard, tp, r);
      ASSERT_EQ(std::memcmp(m.data<float>() + p.offset, mw.raw(), mw.nbytes()), 0) << p.spec.name;
      ASSERT_EQ(std::memcmp(v.data<float>() + p.offset, mw.raw(), mw.nbytes()), 0) << p.spec.name;
    }
  }
}

TEST(Checkpoint, LayoutAndNames) {
  const fs::path d = fresh_dir("names");
  save_tp2(d, 100);
  EXPECT_TRUE(fs::exists(d / "iter_0000100" / "metadata.json"));
  EXPECT_TRUE(fs::exists(d / "iter_0000100" / "model_rank_0_0.safetensors"));
  EXPECT_TRUE(fs::exists(d / "iter_0000100" / "model_rank_1_0.safetensors"));
  EXPECT_FALSE(fs::exists(d / "iter_0000100.tmp"));
  EXPECT_EQ(read_latest_iteration(d.string()), 100);
  const auto reader = CheckpointReader::open(d.string());
  const auto& qkv = reader.info("model.decoder.layers.0.self_attention.linear_qkv.weight");
  EXPECT_EQ(qkv.tp_size, 2);
  EXPECT_EQ(qkv.shard, model::ShardDim::QkvRows);
  EXPECT_EQ(qkv.global_shape, (Shape{24, 8}));
  EXPECT_EQ(qkv.slice_files, (std::vector<std::string>{"model_rank_0_0.safetensors", "model_rank_1_0.safetensors"}));
  EXPECT_EQ(reader.info("model.embedding.word_embeddings.weight").global_shape, (Shape{24, 8}));
  fs::remove_all(d);
}

TEST(Checkpoint, ReshardOnLoadAtTp1Tp2Tp4) {
  const fs::path d = fresh_dir("reshard");
  save_tp2(d, 3);
  for (int tp : {1, 2, 4}) check_load(d, tp, 3);
  fs::remove_all(d);
}

TEST(Checkpoint, FitRowsOnlyForTheVocabulary) {
  Tensor a = Tensor::zeros({4, 2}, DType::F32);
  EXPECT_THROW(fit_rows(a, {6, 2}, nullptr, "decoder.layers.0.mlp.linear_fc1.weight"), Error);
  EXPECT_THROW(fit_rows(a, {4, 3}, nullptr, "embedding.word_embeddings.weight"), Error);
  for (int i = 0; i < 8; ++i) a.data<float>()[i] = static_cast<float>(i + 1);
  Tensor b = fit_rows(a, {3, 2}, nullptr, "embedding.word_embeddings.weight");
  EXPECT_EQ(b.data<float>()[5], 6.f);
  Tensor c = fit_rows(a, {5, 2}, nullptr, "embedding.word_embeddings.weight");
  EXPECT_EQ(c.data<float>()[7], 8.f);
  EXPECT_EQ(c.data<float>()[9], 0.f);
}

// See NOTE [Failure injection] in ckpt/atomic_io.h.
TEST(Checkpoint, FailureAtEveryFileOperationKeepsTheLastCheckpoint) {
  const fs::path probe = fresh_dir("probe");
  save_tp2(probe, 1, 1);
  save_tp2(probe, 2, 1);
  const int64_t ops = fault_points_passed();
  ASSERT_GE(ops, 8);
  for (int64_t n = 1; n <= ops; ++n) {
    const fs::path d = fresh_dir("fail");
    save_tp2(d, 1, 1);
    ::setenv("TRIPOD_CKPT_FAIL_AT", std::to_string(n).c_str(), 1);
    reload_debug_config();
    EXPECT_THROW(save_tp2(d, 2, 1), Error) << "operation " << n;
    ::unsetenv("TRIPOD_CKPT_FAIL_AT");
    reload_debug_config();
    // The marker names a complete checkpoint: 1, or 2 when only the clean-up failed.
    const int64_t latest = read_latest_iteration(d.string());
    ASSERT_TRUE(latest == 1 || latest == 2) << "operation " << n;
    check_load(d, 1, latest);
    save_tp2(d, 2, 1);  // the next save recovers from the debris
    check_load(d, 2, 2);
    EXPECT_FALSE(fs::exists(d / "iter_0000001")) << "--save-retain 1, operation " << n;
    fs::remove_all(d);
  }
  fs::remove_all(probe);
}

TEST(Checkpoint, RetainKeepsTheLastK) {
  const fs::path d = fresh_dir("retain");
  for (int it = 1; it <= 4; ++it) save_tp2(d, it, 2);
  EXPECT_FALSE(fs::exists(d / "iter_0000001"));
  EXPECT_FALSE(fs::exists(d / "iter_0000002"));
  EXPECT_TRUE(fs::exists(d / "iter_0000003"));
  EXPECT_TRUE(fs::exists(d / "iter_0000004"));
  save_tp2(d, 4, 2);  // re-saving an existing iteration replaces it
  check_load(d, 2, 4);
  fs::remove_all(d);
}

void flip(const fs::path& p, size_t offset) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x04);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

// Opening the checkpoint and reading every tensor must throw, naming `what`.
void expect_load_error(const fs::path& d, const std::string& what) {
  try {
    const auto reader = CheckpointReader::open(d.string());
    for (const auto& n : reader.tensor_names()) reader.read_full(n);
    ADD_FAILURE() << "no error; expected one naming " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, CorruptFilesAreClearErrors) {
  const fs::path d = fresh_dir("corrupt");
  save_tp2(d, 5);
  const fs::path it = d / "iter_0000005", rank1 = it / "model_rank_1_0.safetensors", meta = it / "metadata.json";
  const std::string good_meta = read_text(meta.string()), good_rank = read_text(rank1.string());
  auto put = [](const fs::path& p, const std::string& s) {
    std::ofstream(p, std::ios::binary | std::ios::trunc).write(s.data(), static_cast<std::streamsize>(s.size()));
  };
  auto restore = [&] {
    put(meta, good_meta);
    put(rank1, good_rank);
  };
  // Every byte of metadata.json and of the rank file's length + header.
  uint64_t n = 0;
  std::memcpy(&n, good_rank.data(), 8);
  for (size_t i = 0; i < good_meta.size(); i += 37) {
    flip(meta, i);
    expect_load_error(d, "metadata.json");
    restore();
  }
  for (size_t i = 0; i < 8 + n; i += 23) {
    flip(rank1, i);
    expect_load_error(d, "model_rank_1_0.safetensors");
    restore();
  }
  for (size_t i = 8 + n; i < good_rank.size(); i += 97) {  // data bytes: per-tensor CRC
    flip(rank1, i);
    expect_load_error(d, "model_rank_1_0.safetensors");
    restore();
  }
  for (size_t len : {size_t{0}, size_t{7}, size_t{8 + n / 2}, good_rank.size() - 1}) {  // truncation
    put(rank1, good_rank.substr(0, len));
    expect_load_error(d, "model_rank_1_0.safetensors");
    restore();
  }
  fs::remove(rank1);
  expect_load_error(d, "model_rank_1_0.safetensors");
  restore();
  write_text_synced((d / kLatestFile).string(), "12x\n");
  expect_load_error(d, kLatestFile);
  write_text_synced((d / kLatestFile).string(), "6\n");
  expect_load_error(d, "iter_0000006");
  write_text_synced((d / kLatestFile).string(), "5\n");
  check_load(d, 4, 5);
  fs::remove_all(d);
}

// --load DIR as Megatron reads it: nothing there yet is a fresh start; a
// damaged checkpoint is an error, never a silent start over.
TEST(Checkpoint, LoadDirWithoutCheckpointIsAFreshStart) {
  const fs::path d = fresh_dir("fresh");
  std::string why;
  EXPECT_FALSE(load_dir_has_checkpoint((d / "not_yet").string(), &why));
  EXPECT_EQ(why, "the directory does not exist yet");
  fs::create_directories(d);
  EXPECT_FALSE(load_dir_has_checkpoint(d.string(), &why));  // exists, empty
  EXPECT_NE(why.find(kLatestFile), std::string::npos) << why;
  fs::create_directories(d / "iter_0000002.tmp");  // an interrupted first save
  EXPECT_FALSE(load_dir_has_checkpoint(d.string()));
  save_tp2(d, 5);
  EXPECT_TRUE(load_dir_has_checkpoint(d.string()));
  write_text_synced((d / kLatestFile).string(), "5x\n");
  EXPECT_THROW(load_dir_has_checkpoint(d.string()), Error);
  fs::remove(d / kLatestFile);  // committed iter_0000005, no marker
  try {
    load_dir_has_checkpoint(d.string());
    ADD_FAILURE() << "a committed checkpoint without its marker must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("iter_0000005"), std::string::npos) << e.what();
  }
  fs::remove_all(d);
}

// NOTE [Stale temporaries] in ckpt/sharded_checkpoint.cpp: a save removes the
// .tmp/ directories of failed or killed saves of any iteration and the marker
// temporaries of dead processes; a live process's marker temporary stays.
TEST(Checkpoint, SaveRemovesStaleTemporariesOfEarlierSaves) {
  const fs::path d = fresh_dir("stale");
  save_tp2(d, 1);
  fs::create_directories(d / "iter_0000007.tmp");
  std::ofstream(d / "iter_0000007.tmp" / "model_rank_0_0.safetensors") << "partial";
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);  // a pid that is no longer alive
  const fs::path dead = d / ("latest_checkpointed_iteration.txt.tmp." + std::to_string(child));
  const fs::path live = d / ("latest_checkpointed_iteration.txt.tmp." + std::to_string(::getppid()));
  std::ofstream(dead) << "7\n";
  std::ofstream(live) << "7\n";
  save_tp2(d, 2);
  EXPECT_FALSE(fs::exists(d / "iter_0000007.tmp"));
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
  check_load(d, 2, 2);
  fs::remove_all(d);
}

// A failed save re-saving an existing iteration: discard_save removes the
// temporary directory and puts the checkpoint that was moved aside back.
TEST(Checkpoint, DiscardSaveRestoresTheCheckpointMovedAside) {
  const fs::path d = fresh_dir("discard");
  save_tp2(d, 1);
  save_tp2(d, 2);
  const std::string tmp = prepare_save(d.string(), 2);
  std::ofstream(fs::path(tmp) / "model_rank_0_0.safetensors") << "partial";
  fs::rename(d / "iter_0000002", d / "iter_0000002.old");  // as commit_save does before its rename
  discard_save(d.string(), 2);
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_FALSE(fs::exists(d / "iter_0000002.old"));
  check_load(d, 2, 2);
  fs::remove_all(d);
}

// TRIPOD_CKPT_FAIL_ENOSPC: the injected failure of a write is a full disk;
// the error names the folder, the file and the bytes still needed, and the
// commit's own clean-up leaves no temporary directory.
TEST(Checkpoint, FullDiskErrorNamesFolderAndBytes) {
  const fs::path d = fresh_dir("enospc");
  save_tp2(d, 1);
  const std::string meta = (d / "iter_0000002.tmp" / "metadata.json").string();
  // Operations of save_tp2: 1 mkdir, 2-3 the rank files, 4 metadata.json.
  ::setenv("TRIPOD_CKPT_FAIL_AT", "4", 1);
  ::setenv("TRIPOD_CKPT_FAIL_ENOSPC", "1", 1);
  reload_debug_config();
  std::string what;
  try {
    save_tp2(d, 2);
  } catch (const Error& e) {
    what = e.what();
  }
  ::unsetenv("TRIPOD_CKPT_FAIL_AT");
  ::unsetenv("TRIPOD_CKPT_FAIL_ENOSPC");
  reload_debug_config();
  EXPECT_NE(what.find("no space left in " + (d / "iter_0000002.tmp").string()), std::string::npos) << what;
  EXPECT_NE(what.find(meta + " needs "), std::string::npos) << what;
  EXPECT_NE(what.find("more are needed"), std::string::npos) << what;
  EXPECT_FALSE(fs::exists(d / "iter_0000002.tmp")) << what;
  EXPECT_EQ(read_latest_iteration(d.string()), 1);
  save_tp2(d, 2);
  check_load(d, 2, 2);
  fs::remove_all(d);
}

// The streamed rank file (what a training save writes, each tensor here
// in two pieces) has the bytes of write_rank_file for the same tensors.
TEST(ShardedCheckpoint, StreamedRankFileEqualsTheWholeTensorOne) {
  auto be = backend::make_cpu_backend();
  const fs::path a = fresh_dir("whole"), b = fresh_dir("streamed");
  fs::create_directories(a);
  fs::create_directories(b);
  model::ParamStore store(specs(2), 2, 1, *be);
  store.init(kSeed, 0.02f, 1);
  std::vector<ShardTensor> t;
  std::vector<RankFileWriter::Declared> declared;
  for (const auto& p : store.params()) {
    t.push_back({"model." + p.spec.name, p.spec.global_shape, p.spec.shard, store.value_to_host(p)});
    t.push_back({"optim.exp_avg." + p.spec.name, p.spec.global_shape, p.spec.shard,
                 model::take_shard(model::init_full(p.spec, kMomentSeed, 1.f, 1), p.spec.shard, 2, 1)});
  }
  for (const auto& x : t) declared.push_back({x.name, x.global_shape, x.shard, x.local.shape()});
  write_rank_file(a.string(), 1, 2, 0, t, 3);
  RankFileWriter w(b.string(), 1, 2, 0, declared, 3);
  for (const auto& x : t) {
    const int64_t half = x.local.numel() / 2;
    w.write(x.local.data<float>(), half);
    w.write(x.local.data<float>() + half, x.local.numel() - half);
  }
  w.finish();
  const auto slurp = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  ASSERT_EQ(fs::directory_iterator(a)->path().filename(), fs::directory_iterator(b)->path().filename());
  const fs::path fa = fs::directory_iterator(a)->path(), fb = fs::directory_iterator(b)->path();
  const std::string ba = slurp(fa), bb = slurp(fb);
  EXPECT_GT(ba.size(), 1000u);
  EXPECT_TRUE(ba == bb) << fa << " and " << fb << " differ";
  fs::remove_all(a);
  fs::remove_all(b);
}

}  // namespace
