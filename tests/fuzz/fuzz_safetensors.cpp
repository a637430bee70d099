// Fuzz target: the safetensors reader (ckpt/safetensors.h). Input: a whole
// .safetensors file. Every tensor of an accepted file is read, in its own
// dtype and, when it is floating-point, as f32 (CRC-checked where the file carries checksums).
#include "ckpt/safetensors.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tripod;
  const std::string path = fuzz::scratch_dir() + "/t.safetensors";
  fuzz::write_file(path, data, size);
  fuzz::run_input([&] {
    const auto f = ckpt::SafetensorsFile::open(path);
    (void)f.header_crc();
    for (const auto& e : f.entries()) {
      const Tensor t = f.read(e.name);
      TRIPOD_CHECK(t.nbytes() == e.end - e.begin, "fuzz: {} read {} bytes, entry says {}", e.name, t.nbytes(),
                   e.end - e.begin);
      const bool floating = e.dtype == DType::F32 || e.dtype == DType::BF16 || e.dtype == DType::F16 ||
                            e.dtype == DType::F64;
      if (floating) (void)f.read_f32(e.name);
    }
  });
  return 0;
}
