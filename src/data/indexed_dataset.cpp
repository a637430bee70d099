// Implementation of data/indexed_dataset.h: the MMIDIDX reader (mmap, every
// field validated) and writer (temporary names, fsync, rename).
// Reference: megatron/core/datasets/indexed_dataset.py (_IndexReader/_IndexWriter).
#include "data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "base/error.h"
#include "base/temp_files.h"

namespace tripod::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr int64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;
constexpr const char* kRegenerateHint =
    "regenerate the pair with `tripod preprocess --input ... --output-prefix PREFIX` "
    "(it writes PREFIX_text_document.bin/.idx) and pass --data-path PREFIX_text_document";

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

void write_all(int fd, const void* data, size_t size, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    TRIPOD_CHECK_HINT(n > 0, "check free disk space and permissions of the output folder",
                      "writing {} failed: {}", path, std::strerror(errno));
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void fsync_and_close(int fd, const std::string& path) {
  TRIPOD_CHECK(::fsync(fd) == 0, "fsync {} failed: {}", path, std::strerror(errno));
  TRIPOD_CHECK(::close(fd) == 0, "closing {} failed: {}", path, std::strerror(errno));
}

std::string file_identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "missing";
  return fmt::format("{}:{}.{:09d}", static_cast<int64_t>(st.st_size),
                     static_cast<int64_t>(st.st_mtim.tv_sec), st.st_mtim.tv_nsec);
}

}  // namespace

// ---- dtypes ----

int64_t dtype_size(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::kUInt8: case TokenDType::kInt8: return 1;
    case TokenDType::kInt16: case TokenDType::kUInt16: return 2;
    case TokenDType::kInt32: case TokenDType::kFloat32: return 4;
    case TokenDType::kInt64: case TokenDType::kFloat64: return 8;
  }
  TRIPOD_FAIL("unknown token dtype code {}", static_cast<int>(dtype));
}

const char* dtype_name(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::kUInt8: return "uint8";
    case TokenDType::kInt8: return "int8";
    case TokenDType::kInt16: return "int16";
    case TokenDType::kInt32: return "int32";
    case TokenDType::kInt64: return "int64";
    case TokenDType::kFloat64: return "float64";
    case TokenDType::kFloat32: return "float32";
    case TokenDType::kUInt16: return "uint16";
  }
  return "unknown";
}

int64_t dtype_max_id(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::kUInt8: return 255;
    case TokenDType::kInt8: return 127;
    case TokenDType::kInt16: return 32767;
    case TokenDType::kUInt16: return 65535;
    case TokenDType::kInt32: return INT32_MAX;
    // tripod samples are int32: wider types are read but ids must fit int32.
    case TokenDType::kInt64: return INT32_MAX;
    default: return -1;  // float dtypes cannot hold token ids
  }
}

TokenDType dtype_for_vocab(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDType::kUInt16 : TokenDType::kInt32;
}

std::string idx_path(const std::string& prefix) { return prefix + ".idx"; }
std::string bin_path(const std::string& prefix) { return prefix + ".bin"; }

// ---- MappedFile ----

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TRIPOD_CHECK_HINT(fd >= 0, kRegenerateHint, "cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    TRIPOD_FAIL("cannot stat {}: {}", path, std::strerror(errno));
  }
  size_ = static_cast<int64_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(size_), PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    TRIPOD_CHECK(p != MAP_FAILED, "cannot mmap {} ({} bytes): {}", path, size_, std::strerror(errno));
    data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
}

// ---- IndexedDataset ----

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  for (const char* ext : {".bin", ".idx"}) {
    const bool has_ext = prefix.size() > 4 && prefix.compare(prefix.size() - 4, 4, ext) == 0;
    TRIPOD_CHECK_HINT(!has_ext, fmt::format("use --data-path {}", prefix.substr(0, prefix.size() - 4)),
                      "--data-path takes the prefix of the .bin/.idx pair, not a file name: {}", prefix);
  }
  const std::string ip = idx_path(prefix), bp = bin_path(prefix);
  idx_ = std::make_unique<MappedFile>(ip);
  bin_ = std::make_unique<MappedFile>(bp);
  const uint8_t* p = idx_->data();
  const int64_t isize = idx_->size();
  TRIPOD_CHECK_HINT(isize >= kHeaderBytes, kRegenerateHint,
                    "{} is truncated: {} bytes, smaller than the {}-byte MMIDIDX header", ip, isize,
                    kHeaderBytes);
  TRIPOD_CHECK_HINT(std::memcmp(p, kMagic, 9) == 0, kRegenerateHint,
                    "{} is not a Megatron indexed-dataset index (magic is not MMIDIDX)", ip);
  const uint64_t version = load<uint64_t>(p + 9);
  TRIPOD_CHECK_HINT(version == 1, kRegenerateHint, "{}: unsupported index version {} (expected 1)",
                    ip, version);
  const uint8_t code = p[17];
  TRIPOD_CHECK_HINT(code >= 1 && code <= 8 && code != 6 && code != 7, kRegenerateHint,
                    "{}: dtype code {} is not an integer token type", ip, static_cast<int>(code));
  dtype_ = static_cast<TokenDType>(code);
  const uint64_t s = load<uint64_t>(p + 18), d = load<uint64_t>(p + 26);
  // Guard the multiplication below against absurd counts from a corrupt header.
  TRIPOD_CHECK_HINT(s < (1ull << 40) && d < (1ull << 40) && d >= 1, kRegenerateHint,
                    "{}: corrupt header (sequences {}, document indices {})", ip, s, d);
  const int64_t expect = kHeaderBytes + 12 * static_cast<int64_t>(s) + 8 * static_cast<int64_t>(d);
  TRIPOD_CHECK_HINT(isize == expect, kRegenerateHint,
                    "{} is {} ({} bytes, expected {} for {} sequences and {} document indices)", ip,
                    isize < expect ? "truncated" : "too long", isize, expect, s, d);
  num_sequences_ = static_cast<int64_t>(s);
  num_doc_indices_ = static_cast<int64_t>(d);
  lengths_.resize(s);
  if (s) std::memcpy(lengths_.data(), p + kHeaderBytes, 4 * s);
  pointers_ = p + kHeaderBytes + 4 * num_sequences_;
  doc_indices_ = p + kHeaderBytes + 12 * num_sequences_;

  // Document indices first: the checks below name the document of a sequence.
  TRIPOD_CHECK_HINT(document_index(0) == 0 && document_index(num_doc_indices_ - 1) == num_sequences_,
                    kRegenerateHint, "{}: document indices must run from 0 to {}, got {}..{}", ip,
                    num_sequences_, document_index(0), document_index(num_doc_indices_ - 1));
  for (int64_t i = 1; i < num_doc_indices_; ++i)
    TRIPOD_CHECK_HINT(document_index(i) >= document_index(i - 1), kRegenerateHint,
                      "{}: document indices decrease at {}", ip, i);

  const int64_t esize = dtype_size(dtype_), bsize = bin_->size();
  int64_t end = 0;  // where the last byte the index describes ends
  int64_t doc = 0;  // the document of sequence i: document_index(doc) <= i < document_index(doc + 1)
  int64_t prev_doc = 0, prev_len = 0, prev_ptr = 0;
  for (int64_t i = 0; i < num_sequences_; ++i) {
    while (document_index(doc + 1) <= i) ++doc;
    const int64_t len = lengths_[static_cast<size_t>(i)], ptr = pointer(i);
    TRIPOD_CHECK_HINT(len >= 0 && ptr >= 0 && ptr % esize == 0, kRegenerateHint,
                      "{}: sequence {} (document {}) has length {} and byte offset {}", ip, i, doc, len, ptr);
    // Megatron writes the sequences back to back (its offsets are the
    // running sum of the lengths), so a length that disagrees with the next
    // offset is a damaged index: reading it would silently cut or stretch
    // the document.
    TRIPOD_CHECK_HINT(i > 0 || ptr == 0, kRegenerateHint,
                      "{}: document {} (sequence 0) starts at byte {} of the .bin, not 0", ip, doc, ptr);
    TRIPOD_CHECK_HINT(ptr == end, kRegenerateHint,
                      "{}: the lengths do not match the offsets at document {} (sequence {}): its {} tokens "
                      "of {} bytes from byte {} end at byte {}, but the next sequence starts at byte {} "
                      "(offset[i+1] must be offset[i] + length[i] * {})",
                      ip, prev_doc, i - 1, prev_len, esize, prev_ptr, end, ptr, esize);
    // (ptr <= bsize first: a corrupt offset near 2^63 must not overflow the sum)
    TRIPOD_CHECK_HINT(ptr <= bsize && len * esize <= bsize - ptr, kRegenerateHint,
                      "{} is truncated: sequence {} of {} ends at byte {} but the file has {} bytes",
                      bp, i, num_sequences_, static_cast<uint64_t>(ptr) + static_cast<uint64_t>(len * esize),
                      bsize);
    num_tokens_ += len;
    end = ptr + len * esize;
    prev_doc = doc;
    prev_len = len;
    prev_ptr = ptr;
  }
  // The .bin ends exactly where the last sequence does; a longer .bin is the
  // .bin of another (longer) corpus.
  TRIPOD_CHECK_HINT(bsize == end,
                    fmt::format("{} and {} must come from the same `tripod preprocess` (or Megatron "
                                "preprocess_data.py) run; regenerate both",
                                bp, ip),
                    "{} has {} bytes but its index {} describes {} sequences ({} tokens) ending at "
                    "byte {} (the last, document {}, has {} tokens from byte {}): the .bin does not belong "
                    "to this .idx, or that length is wrong",
                    bp, bsize, ip, num_sequences_, num_tokens_, end, prev_doc, prev_len, prev_ptr);
}

int64_t IndexedDataset::pointer(int64_t seq) const { return load<int64_t>(pointers_ + 8 * seq); }
int64_t IndexedDataset::document_index(int64_t d) const { return load<int64_t>(doc_indices_ + 8 * d); }

void IndexedDataset::read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const {
  TRIPOD_CHECK(seq >= 0 && seq < num_sequences_ && offset >= 0 && count >= 0 &&
                   offset + count <= lengths_[static_cast<size_t>(seq)],
               "{}: read of sequence {} tokens [{}, {}) is out of range", prefix_, seq, offset,
               offset + count);
  if (count == 0) return;  // (out may be null then; memcpy must not see it)
  const int64_t esize = dtype_size(dtype_);
  const uint8_t* src = bin_->data() + pointer(seq) + offset * esize;
  switch (dtype_) {
    case TokenDType::kUInt16:
      for (int64_t i = 0; i < count; ++i) out[i] = load<uint16_t>(src + 2 * i);
      break;
    case TokenDType::kInt32:
      std::memcpy(out, src, static_cast<size_t>(count) * 4);
      break;
    case TokenDType::kUInt8:
      for (int64_t i = 0; i < count; ++i) out[i] = src[i];
      break;
    case TokenDType::kInt8:
      for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int8_t>(src[i]);
      break;
    case TokenDType::kInt16:
      for (int64_t i = 0; i < count; ++i) out[i] = load<int16_t>(src + 2 * i);
      break;
    case TokenDType::kInt64:
      for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(load<int64_t>(src + 8 * i));
      break;
    default:
      TRIPOD_FAIL("{}: unsupported dtype {}", prefix_, dtype_name(dtype_));
  }
}

int64_t IndexedDataset::max_token_id() const {
  // Scan sequence by sequence.
  int64_t best = -1;
  std::vector<int32_t> buf;
  for (int64_t i = 0; i < num_sequences_; ++i) {
    const int64_t len = lengths_[static_cast<size_t>(i)];
    if (dtype_ == TokenDType::kUInt16) {
      const uint8_t* src = bin_->data() + pointer(i);
      uint16_t m = 0;
      for (int64_t k = 0; k < len; ++k) m = std::max(m, load<uint16_t>(src + 2 * k));
      if (len > 0) best = std::max<int64_t>(best, m);
      continue;
    }
    buf.resize(static_cast<size_t>(len));
    read(i, 0, len, buf.data());
    for (int32_t t : buf) best = std::max<int64_t>(best, t);
  }
  return best;
}

std::string IndexedDataset::identity() const {
  return file_identity(idx_path(prefix_)) + "/" + file_identity(bin_path(prefix_));
}

// ---- IndexedDatasetWriter ----

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, TokenDType dtype)
    : prefix_(std::move(prefix)), dtype_(dtype) {
  TRIPOD_CHECK(dtype_max_id(dtype) > 0, "cannot write tokens as {}", dtype_name(dtype));
  // The same tag on both names; see NOTE [Temporaries] in base/temp_files.h.
  bin_tmp_ = temporary_name(bin_path(prefix_));
  idx_tmp_ = idx_path(prefix_) + bin_tmp_.substr(bin_path(prefix_).size());
  bin_slot_ = register_temporary(bin_tmp_);
  idx_slot_ = register_temporary(idx_tmp_);
  fd_ = ::open(bin_tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TRIPOD_CHECK_HINT(fd_ >= 0, "check that the folder of --output-prefix exists and is writable",
                    "cannot create {}: {}", bin_tmp_, std::strerror(errno));
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (!finished_) {
    if (fd_ >= 0) ::close(fd_);
    ::unlink(bin_tmp_.c_str());
    ::unlink(idx_tmp_.c_str());
  }
  unregister_temporary(bin_slot_);
  unregister_temporary(idx_slot_);
}

void IndexedDatasetWriter::add_document(const int32_t* tokens, int64_t count) {
  TRIPOD_CHECK(!finished_, "add_document after finish() on {}", prefix_);
  TRIPOD_CHECK(count >= 0 && count <= INT32_MAX, "document of {} tokens", count);
  const int64_t esize = dtype_size(dtype_), max_id = dtype_max_id(dtype_);
  for (int64_t done = 0; done < count;) {
    if (used_ + esize > kBufferBytes) flush_buffer();
    const int64_t n = std::min(count - done, (kBufferBytes - used_) / esize);
    uint8_t* dst = buffer_.get() + used_;
    const int32_t* src = tokens + done;
    int32_t lo = 0, hi = 0;
    for (int64_t i = 0; i < n; ++i) {
      lo = std::min(lo, src[i]);
      hi = std::max(hi, src[i]);
    }
    TRIPOD_CHECK(lo >= 0 && hi <= max_id, "token id {} does not fit the {} dataset {}",
                 lo < 0 ? lo : hi, dtype_name(dtype_), prefix_);
    if (esize == 2) {
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t v = static_cast<uint16_t>(src[i]);
        std::memcpy(dst + 2 * i, &v, 2);
      }
    } else if (esize == 4) {
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    } else if (esize == 1) {
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>(src[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t v = src[i];
        std::memcpy(dst + 8 * i, &v, 8);
      }
    }
    used_ += n * esize;
    done += n;
  }
  lengths_.push_back(static_cast<int32_t>(count));
  num_tokens_ += count;
}

void IndexedDatasetWriter::add_empty_document() {
  TRIPOD_CHECK(!finished_, "add_empty_document after finish() on {}", prefix_);
  empty_after_.push_back(static_cast<int64_t>(lengths_.size()));
}

void IndexedDatasetWriter::flush_buffer() {
  write_all(fd_, buffer_.get(), static_cast<size_t>(used_), bin_tmp_);
  used_ = 0;
}

void IndexedDatasetWriter::finish() {
  TRIPOD_CHECK(!finished_, "finish() called twice on {}", prefix_);
  flush_buffer();
  fsync_and_close(fd_, bin_tmp_);
  fd_ = -1;

  // The index is streamed through the 4 MiB buffer, so finishing needs no
  // memory beyond the lengths (S can be billions).
  int fd = ::open(idx_tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TRIPOD_CHECK(fd >= 0, "cannot create {}: {}", idx_tmp_, std::strerror(errno));
  used_ = 0;
  auto emit = [&](const void* data, size_t size) {
    if (used_ + static_cast<int64_t>(size) > kBufferBytes) {
      write_all(fd, buffer_.get(), static_cast<size_t>(used_), idx_tmp_);
      used_ = 0;
    }
    std::memcpy(buffer_.get() + used_, data, size);
    used_ += static_cast<int64_t>(size);
  };
  try {
    const uint64_t s = lengths_.size(), d = s + 1 + empty_after_.size(), version = 1;
    const uint8_t code = static_cast<uint8_t>(dtype_);
    emit(kMagic, 9);
    emit(&version, 8);
    emit(&code, 1);
    emit(&s, 8);
    emit(&d, 8);
    constexpr size_t kChunk = 1 << 16;
    for (size_t i = 0; i < s; i += kChunk)
      emit(lengths_.data() + i, 4 * std::min<size_t>(kChunk, s - i));
    int64_t ptr = 0;
    const int64_t esize = dtype_size(dtype_);
    for (uint64_t i = 0; i < s; ++i) {
      emit(&ptr, 8);
      ptr += int64_t{lengths_[i]} * esize;
    }
    // 0, then after each document the number of sequences so far: an empty
    // document (no sequence) repeats the value before it.
    size_t e = 0;
    for (uint64_t i = 0; i <= s; ++i) {
      const int64_t v = static_cast<int64_t>(i);
      emit(&v, 8);
      for (; e < empty_after_.size() && empty_after_[e] == v; ++e) emit(&v, 8);
    }
    write_all(fd, buffer_.get(), static_cast<size_t>(used_), idx_tmp_);
  } catch (...) {
    ::close(fd);
    throw;
  }
  fsync_and_close(fd, idx_tmp_);
  // Old .idx goes first: a crash between the renames leaves a .bin alone,
  // which the reader rejects, never a new .bin with a stale .idx.
  ::unlink(idx_path(prefix_).c_str());
  TRIPOD_CHECK(::rename(bin_tmp_.c_str(), bin_path(prefix_).c_str()) == 0, "rename {} failed: {}",
               bin_tmp_, std::strerror(errno));
  TRIPOD_CHECK(::rename(idx_tmp_.c_str(), idx_path(prefix_).c_str()) == 0, "rename {} failed: {}",
               idx_tmp_, std::strerror(errno));
  finished_ = true;
}

void write_file_atomic(const std::string& path, const void* data, int64_t size) {
  // pid alone can collide between hosts sharing a file system: temporary_name adds a random tag.
  const std::string tmp = temporary_name(path);
  struct Registered {
    int slot;
    ~Registered() { unregister_temporary(slot); }
  } registered{register_temporary(tmp)};
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TRIPOD_CHECK(fd >= 0, "cannot create {}: {}", tmp, std::strerror(errno));
  try {
    write_all(fd, data, static_cast<size_t>(size), tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  try {
    fsync_and_close(fd, tmp);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    TRIPOD_FAIL("rename {} -> {} failed: {}", tmp, path, std::strerror(err));
  }
}

}  // namespace tripod::data
