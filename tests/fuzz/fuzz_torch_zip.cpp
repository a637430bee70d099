// Fuzz target: torch.save files (interop/torch_pickle.h TorchFile: the zip
// reader, the unpickler and tensor_f32). Input: a whole .pt file. Every
// floating-point tensor found in an accepted file is read as f32, as the Megatron importer
// reads them.
#include "interop/torch_pickle.h"
#include "fuzz_common.h"

namespace {
void read_tensors(const tripod::interop::TorchFile& f, const tripod::interop::PyValue& v, int depth, int64_t* nodes) {
  using K = tripod::interop::PyValue::Kind;
  if (depth > 64 || ++*nodes > 10000) return;
  if (v.kind == K::kTensor) {  // the floating-point ones, as the importer (the RNG state is bytes)
    if (v.dtype == tripod::DType::F32 || v.dtype == tripod::DType::F16 || v.dtype == tripod::DType::BF16)
      (void)f.tensor_f32(v);
    return;
  }
  for (const auto& it : v.items)
    if (it) read_tensors(f, *it, depth + 1, nodes);
  for (const auto& kv : v.dict)
    if (kv.second) read_tensors(f, *kv.second, depth + 1, nodes);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tripod;
  const std::string path = fuzz::scratch_dir() + "/model_optim_rng.pt";
  fuzz::write_file(path, data, size);
  fuzz::run_input([&] {
    const interop::TorchFile f(path);
    int64_t nodes = 0;
    read_tensors(f, f.root(), 0, &nodes);
  });
  return 0;
}
