// Reading PyTorch's torch.save files (what Megatron-LM's legacy checkpoints
// are) without Python and without running code from the file.
//
// A torch.save file is a zip archive of stored (uncompressed) entries:
//   <name>/data.pkl        the object, pickled (protocol 2)
//   <name>/data/<key>      the raw bytes of each tensor storage
//   <name>/version, <name>/byteorder, ...
// The pickle refers to storages by persistent id ('storage', torch.XStorage,
// key, location, numel) and rebuilds tensors with
// torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...).
//
// ZipArchive reads the central directory (ZIP64 included) of a memory-mapped
// file and hands out stored entries; a compressed entry is an error naming it
// (torch.save never compresses). Debian's libzip or minizip would do the same
// but are not needed for stored entries.
//
// unpickle() is a restricted interpreter of the pickle opcodes: it builds
// plain values (None, bool, int, float, str, bytes, tuple, list, dict) and
// resolves each global against an allowlist of what such files contain:
// collections.OrderedDict, the tensor and parameter rebuild functions (also
// _rebuild_from_type_v2 of tensors with Python attributes), the
// torch.*Storage types, argparse.Namespace (Megatron's args), _codecs.encode
// (protocol 2 bytes) and, as inert objects, torch dtypes, numpy's array
// reconstruction (the saved RNG state), io.BytesIO and megatron.* enums. Any
// other global (os.system, builtins.eval, ...) is an Error naming it. No
// global is ever called: "calling" one only records a value.
//
// Usage:
//   TorchFile f("iter_0000010/mp_rank_00/model_optim_rng.pt");
//   const PyValue& root = f.root();               // the saved dict
//   const PyValue* w = root.get("model")->get("decoder.final_layernorm.weight");
//   Tensor t = f.tensor_f32(*w);                  // (C,) float32
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace tripod::interop {

class ZipArchive {
 public:
  explicit ZipArchive(const std::string& path);
  ~ZipArchive();
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;
  struct Entry {
    const uint8_t* data = nullptr;
    uint64_t size = 0;
  };
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  Entry entry(const std::string& name) const;  // Error when missing
  std::vector<std::string> names() const;
  const std::string& path() const { return path_; }

 private:
  struct Raw {
    uint64_t local_offset, compressed, size;
    uint16_t method;
  };
  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  std::map<std::string, Raw> entries_;
};

struct PyValue;
using PyPtr = std::shared_ptr<PyValue>;

struct PyValue {
  enum class Kind {
    kNone, kBool, kInt, kFloat, kStr, kBytes, kTuple, kList, kDict, kGlobal, kObject, kStorage, kTensor
  };
  Kind kind = Kind::kNone;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                             // str, bytes, global "module.name", object/storage class
  std::vector<PyPtr> items;                  // tuple, list; object: the arguments it was made with
  std::vector<std::pair<PyPtr, PyPtr>> dict;  // dict (in order); object: its __dict__ after BUILD
  // Tensor: storage key and element type, offset and shape/stride in elements.
  std::string storage_key;
  DType dtype = DType::F32;
  int64_t storage_offset = 0;
  std::vector<int64_t> size, stride;

  // dict lookup by string key; nullptr when absent or not a dict/object.
  const PyValue* get(const std::string& key) const;
  std::string repr() const;  // short, for error messages
};

// Parses a pickle; `what` names the source in errors.
PyPtr unpickle(const uint8_t* data, size_t size, const std::string& what);

class TorchFile {
 public:
  explicit TorchFile(const std::string& path);
  const PyValue& root() const { return *root_; }
  // The tensor's elements as float32 (F32, F16, BF16 storages), shape = size.
  Tensor tensor_f32(const PyValue& t) const;
  const std::string& path() const { return zip_.path(); }

 private:
  ZipArchive zip_;
  std::string prefix_;  // "<name>/"
  PyPtr root_;
};

}  // namespace tripod::interop
