// Tensor = shape + dtype + device + shared storage + element offset.
//
// Tensors are always contiguous (row-major); a view is a contiguous range of
// another tensor's storage with its own shape (narrow along dim 0, reshape,
// or a flat range). That is all the model and the optimizer need, and it
// keeps every kernel's indexing trivial. Copying a Tensor copies the handle,
// not the data.
//
//   Tensor x = Tensor::empty({B, T, C}, DType::F32);   // host
//   Tensor row = x.narrow(0, b, 1).view({T, C});         // no copy
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace tripod {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& shape);   // "(4, 32, 64)"
int64_t shape_numel(const Shape& shape);

class Storage {
 public:
  Storage(size_t bytes, Device device);      // allocates through allocator_for(device.type)
  Storage(void* external, size_t bytes, Device device);  // wraps memory it does not own
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  bool owned_ = true;
};

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype);  // host only
  static Tensor wrap(void* data, const Shape& shape, DType dtype, Device device = Device::cpu());

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  bool is_cpu() const { return device().is_cpu(); }

  void* raw() const;  // first element
  template <typename T> T* data() const {
    check_dtype(dtype_of<T>());
    return static_cast<T*>(raw());
  }
  // bf16/f16 element storage, for code that handles the bits itself.
  uint16_t* data_u16() const { return static_cast<uint16_t*>(raw()); }

  Tensor view(const Shape& shape) const;                  // same numel
  Tensor narrow(int64_t start, int64_t length) const;      // along dim 0
  Tensor flat(int64_t offset, const Shape& shape) const;   // elements [offset, offset+numel(shape))
  bool same_storage(const Tensor& other) const { return storage_ == other.storage_; }
  std::string str() const;  // "f32(4, 32, 64) on cpu"

 private:
  void check_dtype(DType expected) const;
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::F32;
};

// TRIPOD_CHECK that t has the given shape, naming `what` in the error.
void check_shape(const Tensor& t, const Shape& expected, const char* what);

}  // namespace tripod
