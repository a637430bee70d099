// Fuzz target: checkpoint metadata (ckpt/sharded_checkpoint.h). Input: the
// text of iter_0000001/metadata.json, next to real rank files written once
// by the real save path. When the input is a JSON object, its "crc32" is
// recomputed first (as commit_save writes it), so the fuzzer gets past the
// checksum into the tensor index, the model arguments and the rank files.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ckpt/sharded_checkpoint.h"
#include "fuzz_common.h"
#include "fuzz_ckpt_fixture.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tripod;
  static const std::string dir = fuzz::make_checkpoint_fixture(fuzz::scratch_dir() + "/ckpt");
  std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_discarded() && j.is_object()) text = fuzz::with_metadata_checksum(std::move(j));
  fuzz::write_file(dir + "/" + ckpt::iter_dir_name(1) + "/" + ckpt::kMetadataFile, text);
  fuzz::run_input([&] {
    const auto r = ckpt::CheckpointReader::open(dir, 1);
    fuzz::run_input([&] { (void)r.config(); });
    r.verify();
    for (const auto& name : r.tensor_names()) (void)r.read_full(name);
  });
  return 0;
}
