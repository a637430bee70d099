// Implementation of tensor/tensor.h.
#include "tensor/tensor.h"

#include <cstring>

#include "base/error.h"
#include "tensor/allocator.h"

namespace tripod {

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    TRIPOD_CHECK(d >= 0, "negative dimension in shape {}", shape_str(shape));
    // (shapes come from files too: a corrupt one must not overflow)
    TRIPOD_CHECK(!__builtin_mul_overflow(n, d, &n), "shape {} has more than 2^63 elements", shape_str(shape));
  }
  return n;
}

Storage::Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  data_ = allocator_for(device.type).allocate(bytes, device);
}
Storage::Storage(void* external, size_t bytes, Device device)
    : data_(external), bytes_(bytes), device_(device), owned_(false) {}
Storage::~Storage() {
  if (owned_ && data_) allocator_for(device_.type).deallocate(data_, bytes_, device_);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(t.nbytes(), device);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  if (t.nbytes()) std::memset(t.raw(), 0, t.nbytes());
  return t;
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(data, t.nbytes(), device);
  return t;
}

int64_t Tensor::size(int64_t d) const {
  if (d < 0) d += dim();
  TRIPOD_CHECK(d >= 0 && d < dim(), "dimension {} out of range for shape {}", d, shape_str(shape_));
  return shape_[static_cast<size_t>(d)];
}

void* Tensor::raw() const {
  TRIPOD_CHECK(storage_, "use of an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

void Tensor::check_dtype(DType expected) const {
  TRIPOD_CHECK(dtype_ == expected, "tensor {} accessed as {}", str(), dtype_name(expected));
}

Tensor Tensor::view(const Shape& shape) const {
  TRIPOD_CHECK(shape_numel(shape) == numel_, "cannot view {} as {}", str(), shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::narrow(int64_t start, int64_t length) const {
  TRIPOD_CHECK(dim() >= 1 && start >= 0 && length >= 0 && start + length <= shape_[0],
               "narrow({}, {}) out of range for {}", start, length, str());
  int64_t row = shape_[0] ? numel_ / shape_[0] : 0;
  Tensor t = *this;
  t.shape_[0] = length;
  t.offset_ += start * row;
  t.numel_ = length * row;
  return t;
}

Tensor Tensor::flat(int64_t offset, const Shape& shape) const {
  int64_t n = shape_numel(shape);
  TRIPOD_CHECK(offset >= 0 && offset + n <= numel_, "flat range [{}, {}) out of range for {}",
               offset, offset + n, str());
  Tensor t = *this;
  t.shape_ = shape;
  t.offset_ += offset;
  t.numel_ = n;
  return t;
}

std::string Tensor::str() const {
  return fmt::format("{}{} on {}", dtype_name(dtype_), shape_str(shape_), device().str());
}

void check_shape(const Tensor& t, const Shape& expected, const char* what) {
  TRIPOD_CHECK(t.defined() && t.shape() == expected, "{}: expected shape {}, got {}", what,
               shape_str(expected), t.defined() ? t.str() : std::string("undefined tensor"));
}

}  // namespace tripod
