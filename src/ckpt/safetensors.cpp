// Implementation of ckpt/safetensors.h.
#include "ckpt/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "ckpt/atomic_io.h"

namespace tripod::ckpt {
namespace {

using json = nlohmann::json;
constexpr uint64_t kMaxHeader = 100ull << 20;  // the reference implementation's limit
constexpr uint64_t kMaxDim = 1ull << 40;

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}

// pread the whole range or fail naming the file.
void read_at(int fd, const std::string& path, void* dst, uint64_t n, uint64_t offset) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    TRIPOD_CHECK(r > 0, "{}: unexpected end of file or read error at byte {}: {}", path, offset,
                 r == 0 ? "truncated" : std::strerror(errno));
    p += r;
    n -= static_cast<uint64_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

struct Fd {
  int fd;
  ~Fd() { if (fd >= 0) ::close(fd); }
};

}  // namespace

uint32_t crc32(const void* data, size_t bytes, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = crc ^ 0xFFFFFFFFu;
  for (size_t i = 0; i < bytes; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

const char* st_dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U16: return "U16";
    case DType::U8: return "U8";
    case DType::E4M3: return "F8_E4M3";  // the safetensors names of the OCP FP8 formats
    case DType::E5M2: return "F8_E5M2";
  }
  return "?";
}

DType st_dtype_from_name(const std::string& n, const std::string& file) {
  for (DType d : {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U16, DType::U8,
                  DType::E4M3, DType::E5M2})
    if (n == st_dtype_name(d)) return d;
  TRIPOD_FAIL("{}: unsupported safetensors dtype '{}' (tripod reads F32, F64, BF16, F16, I32, I64, U16, U8, F8_E4M3, "
              "F8_E5M2)", file, n);
}

// ---- writer ----

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata, bool with_checksums) {
  std::vector<SafetensorsWriter::Entry> entries;
  for (const auto& [name, t] : tensors) {
    TRIPOD_CHECK(t.is_cpu(), "write_safetensors: tensor {} is not on the host", name);
    entries.push_back({name, t.dtype(), t.shape()});
  }
  SafetensorsWriter w(path, std::move(entries), metadata, with_checksums);
  for (const auto& [name, t] : tensors) w.write(t.raw(), t.nbytes());
  w.finish();
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<Entry> entries,
                                     const std::map<std::string, std::string>& metadata, bool with_checksums)
    : path_(path), entries_(std::move(entries)), metadata_(metadata), with_checksums_(with_checksums) {
  begin_.push_back(0);
  for (const auto& e : entries_) {
    TRIPOD_CHECK(e.name != "__metadata__", "{}: a tensor cannot be named __metadata__", path);
    begin_.push_back(begin_.back() + static_cast<uint64_t>(shape_numel(e.shape)) * dtype_size(e.dtype));
  }
  crc_.assign(entries_.size(), 0);
  data_start_ = header_bytes().size();  // the CRCs are fixed-width: the length does not depend on them
  file_ = std::make_unique<SyncedFileWriter>(path, data_start_ + begin_.back());
  // The header first with CRCs of zero (the right length), the file then in
  // order as write_file_synced writes it (a kill leaves the same torn size).
  const std::string h = header_bytes();
  file_->write_at(0, h.data(), h.size());
  while (current_ < entries_.size() && begin_[current_ + 1] == begin_[current_]) ++current_;  // empty tensors
}

std::string SafetensorsWriter::header_bytes() const {
  json header = json::object();
  json meta = json::object();
  for (const auto& [k, v] : metadata_) meta[k] = v;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    TRIPOD_CHECK(!header.contains(e.name), "{}: duplicate tensor name {}", path_, e.name);
    header[e.name] = {{"dtype", st_dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {begin_[i], begin_[i + 1]}}};
    if (with_checksums_) meta["crc32." + e.name] = fmt::format("{:08x}", crc_[i]);
  }
  if (!meta.empty()) header["__metadata__"] = meta;
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // the data starts 8-byte aligned (as the reference writer)
  std::string bytes(8, '\0');
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return bytes + h;
}

void SafetensorsWriter::write(const void* bytes, size_t n) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  while (n > 0) {
    TRIPOD_CHECK(current_ < entries_.size(), "{}: more bytes than the tensors declared", path_);
    const uint64_t size = begin_[current_ + 1] - begin_[current_];
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n, size - filled_));
    file_->write_at(data_start_ + begin_[current_] + filled_, p, take);
    if (with_checksums_) crc_[current_] = crc32(p, take, crc_[current_]);
    filled_ += take;
    p += take;
    n -= take;
    if (filled_ == size) {
      filled_ = 0;
      ++current_;
      while (current_ < entries_.size() && begin_[current_ + 1] == begin_[current_]) ++current_;
    }
  }
}

void SafetensorsWriter::finish() {
  TRIPOD_CHECK(current_ == entries_.size(), "{}: tensor {} of {} was not written in full", path_, current_ + 1,
               entries_.size());
  const std::string h = header_bytes();
  TRIPOD_CHECK(h.size() == data_start_, "{}: the header changed length", path_);
  if (with_checksums_) file_->overwrite_at(0, h.data(), h.size());
  file_->finish();
}

// ---- reader ----

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  TRIPOD_CHECK(fd.fd >= 0, "cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  TRIPOD_CHECK(::fstat(fd.fd, &st) == 0, "cannot stat {}", path);
  f.file_size_ = static_cast<uint64_t>(st.st_size);
  TRIPOD_CHECK(f.file_size_ >= 8, "{}: not a safetensors file ({} bytes; truncated?)", path, f.file_size_);
  unsigned char len_bytes[8];
  read_at(fd.fd, path, len_bytes, 8, 0);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len_bytes[i]) << (8 * i);
  TRIPOD_CHECK(n >= 2 && n <= kMaxHeader && n <= f.file_size_ - 8,
               "{}: header length {} is invalid for a file of {} bytes (truncated or corrupt)", path, n, f.file_size_);
  std::string h(n, '\0');
  read_at(fd.fd, path, h.data(), n, 8);
  f.header_crc_ = crc32(h.data(), h.size(), crc32(len_bytes, 8));
  json header = json::parse(h, nullptr, /*allow_exceptions=*/false);
  TRIPOD_CHECK(!header.is_discarded() && header.is_object(), "{}: the header is not valid JSON (corrupt file)", path);
  f.data_start_ = 8 + n;
  const uint64_t data_size = f.file_size_ - f.data_start_;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      TRIPOD_CHECK(it->is_object(), "{}: __metadata__ is not an object", path);
      for (auto m = it->begin(); m != it->end(); ++m) {
        TRIPOD_CHECK(m->is_string(), "{}: __metadata__ value of '{}' is not a string", path, m.key());
        f.metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const json& e = *it;
    TRIPOD_CHECK(e.is_object() && e.contains("dtype") && e["dtype"].is_string() && e.contains("shape") &&
                     e["shape"].is_array() && e.contains("data_offsets") && e["data_offsets"].is_array() &&
                     e["data_offsets"].size() == 2 && e["data_offsets"][0].is_number_unsigned() &&
                     e["data_offsets"][1].is_number_unsigned(),
                 "{}: malformed header entry for tensor '{}'", path, it.key());
    StEntry s;
    s.name = it.key();
    s.dtype = st_dtype_from_name(e["dtype"].get<std::string>(), path);
    uint64_t numel = 1;
    for (const auto& d : e["shape"]) {
      TRIPOD_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= kMaxDim, "{}: tensor '{}' has an invalid shape {}",
                   path, s.name, e["shape"].dump());
      const uint64_t v = d.get<uint64_t>();
      TRIPOD_CHECK(v == 0 || numel <= (1ull << 62) / v, "{}: tensor '{}' shape {} overflows", path, s.name,
                   e["shape"].dump());
      numel *= v;
      s.shape.push_back(static_cast<int64_t>(v));
    }
    s.begin = e["data_offsets"][0].get<uint64_t>();
    s.end = e["data_offsets"][1].get<uint64_t>();
    TRIPOD_CHECK(s.begin <= s.end && s.end <= data_size,
                 "{}: tensor '{}' data_offsets [{}, {}] outside the {} data bytes (truncated or corrupt)", path,
                 s.name, s.begin, s.end, data_size);
    TRIPOD_CHECK(s.end - s.begin == numel * dtype_size(s.dtype),
                 "{}: tensor '{}' holds {} bytes but {} {} needs {}", path, s.name, s.end - s.begin,
                 e["dtype"].get<std::string>(), e["shape"].dump(), numel * dtype_size(s.dtype));
    f.entries_.push_back(std::move(s));
  }
  // The data section is exactly the tensors, back to back (the format's rule).
  std::vector<const StEntry*> by_offset;
  for (const auto& s : f.entries_) by_offset.push_back(&s);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  uint64_t expect = 0;
  for (const auto* s : by_offset) {
    TRIPOD_CHECK(s->begin == expect, "{}: tensor '{}' starts at byte {}, expected {} (overlap or gap: corrupt file)",
                 path, s->name, s->begin, expect);
    expect = s->end;
  }
  TRIPOD_CHECK(expect == data_size, "{}: the tensors cover {} bytes but the data section has {} (truncated or "
               "corrupt)", path, expect, data_size);
  for (size_t i = 0; i < f.entries_.size(); ++i) f.index_[f.entries_[i].name] = i;
  return f;
}

const StEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Tensor SafetensorsFile::read(const std::string& name) const {
  const StEntry* e = find(name);
  TRIPOD_CHECK(e, "{}: no tensor named '{}'", path_, name);
  Tensor t = Tensor::empty(e->shape, e->dtype);
  Fd fd{::open(path_.c_str(), O_RDONLY | O_CLOEXEC)};
  TRIPOD_CHECK(fd.fd >= 0, "cannot open {}: {}", path_, std::strerror(errno));
  struct stat st {};
  TRIPOD_CHECK(::fstat(fd.fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == file_size_,
               "{}: the file changed size since it was opened", path_);
  read_at(fd.fd, path_, t.raw(), e->end - e->begin, data_start_ + e->begin);
  auto crc = metadata_.find("crc32." + name);
  if (crc != metadata_.end()) {
    const std::string got = fmt::format("{:08x}", crc32(t.raw(), t.nbytes()));
    TRIPOD_CHECK(got == crc->second, "{}: checksum mismatch in tensor '{}' (stored {}, computed {}): the file is "
                 "corrupt", path_, name, crc->second, got);
  }
  return t;
}

Tensor SafetensorsFile::read_f32(const std::string& name) const {
  Tensor t = read(name);
  if (t.dtype() == DType::F32) return t;
  Tensor out = Tensor::empty(t.shape(), DType::F32);
  float* o = out.data<float>();
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) o[i] = bf16_to_f32(t.data_u16()[i]);
      break;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) o[i] = f16_to_f32(t.data_u16()[i]);
      break;
    case DType::F64:
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(t.data<double>()[i]);
      break;
    default:
      TRIPOD_FAIL("{}: tensor '{}' has dtype {}, expected a floating-point type", path_, name, st_dtype_name(t.dtype()));
  }
  return out;
}

}  // namespace tripod::ckpt
