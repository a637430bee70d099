// Megatron-LM's indexed dataset: a `.bin` of raw token ids and an `.idx`
// index, byte-compatible with megatron/core/datasets/indexed_dataset.py
// (MMapIndexedDataset, index version 1). Read through mmap; written by
// `tripod preprocess` and by tests.
//
// NOTE [MMIDIDX layout] (all little-endian, no padding)
//   .idx: char[9]  magic "MMIDIDX\x00\x00"
//         uint64   version = 1
//         uint8    dtype code (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
//                  6 float64, 7 float32, 8 uint16)
//         uint64   S = number of sequences
//         uint64   D = number of document boundaries (documents + 1)
//         int32[S] sequence lengths (tokens)
//         int64[S] sequence byte offsets into .bin
//         int64[D] document indices: 0, then the sequence index after each
//                  document (tripod writes one sequence per document; an
//                  empty document has no sequence and repeats the previous
//                  index, as Megatron's add_document([], []) writes it)
//   .bin: the tokens of every sequence back to back, dtype as above.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tripod::data {

enum class TokenDType : uint8_t {
  kUInt8 = 1, kInt8 = 2, kInt16 = 3, kInt32 = 4, kInt64 = 5, kFloat64 = 6, kFloat32 = 7,
  kUInt16 = 8,
};

int64_t dtype_size(TokenDType dtype);          // bytes per token; throws on unknown codes
const char* dtype_name(TokenDType dtype);
// Largest token id the dtype can store (e.g. 65535 for uint16).
int64_t dtype_max_id(TokenDType dtype);
// Megatron's choice: uint16 when the vocab has fewer than 65500 entries, else int32.
TokenDType dtype_for_vocab(int64_t vocab_size);

std::string idx_path(const std::string& prefix);  // prefix + ".idx"
std::string bin_path(const std::string& prefix);  // prefix + ".bin"

// A read-only memory map of a whole file (empty files map to nullptr, size 0).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  int64_t size_ = 0;
};

// Reader. Construction validates every size and offset against the file
// sizes and throws tripod::Error naming the file and the fix; afterwards
// every read is in bounds. Thread-safe for concurrent reads.
class IndexedDataset {
 public:
  explicit IndexedDataset(const std::string& prefix);

  const std::string& prefix() const { return prefix_; }
  TokenDType dtype() const { return dtype_; }
  int64_t num_sequences() const { return num_sequences_; }
  int64_t num_documents() const { return num_doc_indices_ - 1; }
  int64_t num_tokens() const { return num_tokens_; }
  // The index arrays sit unaligned in the .idx (after its 34-byte header), so
  // the lengths are copied once into an aligned array (4 bytes per
  // sequence) and the 8-byte fields are read through memcpy.
  const int32_t* sequence_lengths() const { return lengths_.data(); }  // (S,)
  int32_t length(int64_t seq) const { return lengths_[static_cast<size_t>(seq)]; }
  int64_t pointer(int64_t seq) const;        // byte offset of sequence seq in .bin
  int64_t document_index(int64_t d) const;   // d in [0, D)

  // Copies tokens [offset, offset + count) of sequence seq into out (as int32).
  void read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const;
  // Largest token id in the whole .bin (a full scan; callers cache it).
  int64_t max_token_id() const;
  // "size:mtime" of both files: changes whenever either file is rewritten.
  std::string identity() const;

 private:
  std::string prefix_;
  std::unique_ptr<MappedFile> idx_, bin_;
  TokenDType dtype_ = TokenDType::kUInt16;
  int64_t num_sequences_ = 0, num_doc_indices_ = 0, num_tokens_ = 0;
  std::vector<int32_t> lengths_;            // (S,) aligned copy
  const uint8_t* pointers_ = nullptr;       // int64[S] in the mapped .idx
  const uint8_t* doc_indices_ = nullptr;    // int64[D] in the mapped .idx
};

// Writer. Tokens go to "<prefix>.bin.tmp-<pid>-<random>" as they arrive (NOTE
// [Temporaries] in base/temp_files.h: removed on errors and on SIGTERM/SIGINT
// once the program called remove_temporaries_on_signal()); finish()
// writes the index, fsyncs both and renames them into place (removing any
// old .idx first), so an interrupted run never leaves a pair that looks
// valid. Memory: 4 bytes per sequence (the lengths) and 8 per empty
// document, independent of tokens.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(std::string prefix, TokenDType dtype);
  ~IndexedDatasetWriter();  // removes the temporary files if finish() was not reached
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Appends one document of one sequence (of `count` tokens, 0 allowed:
  // Megatron's add_item + end_document). Ids must fit the dtype.
  void add_document(const int32_t* tokens, int64_t count);
  // Appends a document with no sequence: the document index repeats, as
  // Megatron's preprocess_data.py writes a record that tokenizes to nothing.
  void add_empty_document();
  void finish();

  int64_t num_documents() const { return static_cast<int64_t>(lengths_.size() + empty_after_.size()); }
  int64_t num_tokens() const { return num_tokens_; }

 private:
  void flush_buffer();

  std::string prefix_, bin_tmp_, idx_tmp_;
  TokenDType dtype_;
  int fd_ = -1;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> empty_after_;  // per empty document: the sequences before it (ascending)
  static constexpr int64_t kBufferBytes = 1 << 22;
  std::unique_ptr<uint8_t[]> buffer_ = std::make_unique<uint8_t[]>(kBufferBytes);  // pending .bin bytes
  int64_t used_ = 0;
  int64_t num_tokens_ = 0;
  bool finished_ = false;
  int bin_slot_ = -1, idx_slot_ = -1;  // base/temp_files.h: removed on SIGTERM/SIGINT
};

// Writes `data` to `path` atomically: temp file in the same folder, fsync,
// rename. Used for index caches and other files that readers may race on.
void write_file_atomic(const std::string& path, const void* data, int64_t size);

}  // namespace tripod::data
