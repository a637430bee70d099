// safetensors reader and writer (the format Hugging Face uses; no code runs
// on load, unlike pickle):
//
//   [8 bytes: N, little-endian u64][N bytes: JSON header][data]
//   header = {"__metadata__": {str: str}, "<name>": {"dtype": "F32",
//             "shape": [..], "data_offsets": [begin, end]}, ...}
//   offsets are relative to the start of the data section.
//
// The reader validates everything before use: the header length against the
// file size, the JSON, every dtype, shape and offset (no overflow, inside
// the data, sizes that match the shape, no gaps or overlaps), so a truncated
// or crafted file is an Error naming the file, never an out-of-bounds read.
// Tensors written by tripod also carry a CRC-32 per tensor in __metadata__
// ("crc32.<name>"), checked when the tensor is read: a flipped bit in the
// data is an error too.
//
// Relates to: ckpt/sharded_checkpoint.h (one file per rank), interop/hf_gpt2.h.
// Reference: github.com/huggingface/safetensors (format description).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/atomic_io.h"
#include "tensor/tensor.h"

namespace tripod::ckpt {

// CRC-32 (IEEE 802.3, as zlib), chainable: crc32(b, crc32(a)) == crc32(a+b).
uint32_t crc32(const void* data, size_t bytes, uint32_t crc = 0);

// Name of a dtype in safetensors ("F32", "BF16", ...) and back.
const char* st_dtype_name(DType dtype);
DType st_dtype_from_name(const std::string& name, const std::string& file);

struct StEntry {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section
};

// Writes `tensors` (host, contiguous) to `path` with fsync, in the order
// given. Each write goes through ckpt::fault_point (see NOTE [Failure
// injection] in atomic_io.h).
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata, bool with_checksums = true);

// The same file written one tensor (or a piece of one) at a time, so that
// the writer holds no more than the piece it passes: the tensors' names,
// dtypes and shapes are given up front (the header's offsets follow from
// them), each tensor's bytes arrive in order through write() in pieces of
// any size, and finish() writes the header again with the CRCs (they are
// fixed-width, so its length is known at the start) and fsyncs. The bytes equal
// write_safetensors' for the same tensors. One fault point (atomic_io.h).
class SafetensorsWriter {
 public:
  struct Entry {
    std::string name;
    DType dtype = DType::F32;
    Shape shape;
  };
  SafetensorsWriter(const std::string& path, std::vector<Entry> entries,
                    const std::map<std::string, std::string>& metadata, bool with_checksums = true);
  // The next bytes of the current tensor (moves to the next once it is full).
  void write(const void* bytes, size_t n);
  void finish();

 private:
  std::string header_bytes() const;  // the 8-byte length and the header, padded
  std::string path_;
  std::vector<Entry> entries_;
  std::vector<uint64_t> begin_;  // each tensor's byte offset in the data section (one more: the end)
  std::vector<uint32_t> crc_;
  std::map<std::string, std::string> metadata_;
  bool with_checksums_ = true;
  uint64_t data_start_ = 0;
  size_t current_ = 0;     // the tensor write() fills
  uint64_t filled_ = 0;    // its bytes so far
  std::unique_ptr<SyncedFileWriter> file_;
};

// A validated safetensors file. open() reads and checks the header only;
// read() reads one tensor's bytes (and checks its CRC when present).
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);
  const std::string& path() const { return path_; }
  const std::vector<StEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t file_size() const { return file_size_; }
  // CRC-32 of the first 8 + N bytes (length and header): metadata.json
  // records it, so a flipped bit in a header is caught too.
  uint32_t header_crc() const { return header_crc_; }
  const StEntry* find(const std::string& name) const;
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  // The tensor in its stored dtype (host).
  Tensor read(const std::string& name) const;
  // The tensor as f32 (F32, BF16, F16 and F64 are converted).
  Tensor read_f32(const std::string& name) const;

 private:
  std::string path_;
  uint64_t data_start_ = 0, file_size_ = 0;
  uint32_t header_crc_ = 0;
  std::vector<StEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace tripod::ckpt
