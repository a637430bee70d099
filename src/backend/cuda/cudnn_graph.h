// A small builder over cuDNN 9's backend graph API (cudnn_graph.h): tensor,
// matmul, pointwise, reduction and reshape operation descriptors, an
// operation graph, engine heuristics (mode A, then fallback) and one
// execution plan, executed with a variant pack. cuDNN is loaded at run time
// (dlopen of libcudnn.so.9), so binaries start where cuDNN is missing and
// callers fall back to their own kernels. Internal to backend/cuda; the
// attention graphs that use it are in cudnn_attention.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#if TRIPOD_HAVE_CUDNN_GRAPH
#include <cudnn_graph.h>
#endif

namespace tripod::backend::cuda::cudnn {

// Why a graph could not be built or run (caught by callers, who fall back).
struct GraphError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Loads cuDNN once. Returns false (and the reason) when the library or a
// symbol is missing, or its major version is not 9.
bool available(std::string* why = nullptr);
size_t version();  // cudnnGetVersion(), e.g. 91900; 0 when unavailable

#if TRIPOD_HAVE_CUDNN_GRAPH

// One cudnnHandle_t per device, created on first use on the current device.
cudnnHandle_t handle_for_current_device();

// Owner of one backend descriptor.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type);
  ~Desc();
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
           const void* values);
  void set_desc(cudnnBackendAttributeName_t name, const Desc& other);
  void finalize(const char* what);

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// Builds one operation graph and its execution plan. Tensors are named by
// unique ids; virtual tensors live only inside the fused kernel, by-value
// tensors are host scalars passed in the variant pack.
class Graph {
 public:
  struct TensorSpec {
    cudnnDataType_t dtype;
    std::vector<int64_t> dims, strides;
    bool is_virtual = false;
    bool by_value = false;
  };

  // Declares a tensor and returns its uid (uids are assigned 1, 2, ...).
  int64_t tensor(const TensorSpec& spec);
  int64_t virtual_tensor(cudnnDataType_t dtype, std::vector<int64_t> dims, std::vector<int64_t> strides) {
    return tensor({dtype, std::move(dims), std::move(strides), true, false});
  }
  int64_t scalar(float value);  // by-value f32 [1,1,1,1]; the value is kept here

  void matmul(int64_t a, int64_t b, int64_t c);
  // y = mode(x[, b][, t]); axis only for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t y, int64_t b = 0, int64_t t = 0,
                 cudnnDataType_t math = CUDNN_DATA_FLOAT, int64_t axis = -1);
  void reduction(cudnnReduceTensorOp_t op, int64_t x, int64_t y);
  void reshape(int64_t x, int64_t y);

  // Finalizes the graph and picks the first engine config from the
  // heuristics that finalizes into a plan. Throws GraphError.
  void build(cudnnHandle_t handle);
  int64_t workspace_bytes() const { return workspace_bytes_; }
  const std::string& engine_note() const { return engine_note_; }

  // Runs the plan. ptrs[i] is the device pointer of uids[i] (scalars are
  // added here). Throws GraphError.
  void execute(cudnnHandle_t handle, cudaStream_t stream, const std::vector<int64_t>& uids,
               const std::vector<void*>& ptrs, void* workspace) const;

 private:
  std::vector<std::unique_ptr<Desc>> tensors_;  // index uid - 1
  std::vector<std::unique_ptr<Desc>> keep_;     // op and helper descriptors
  std::vector<Desc*> ops_;
  std::vector<std::pair<int64_t, std::unique_ptr<float>>> scalars_;
  std::unique_ptr<Desc> graph_, plan_;
  int64_t workspace_bytes_ = 0;
  std::string engine_note_;
  const Desc& t(int64_t uid) const;
};

#endif  // TRIPOD_HAVE_CUDNN_GRAPH

}  // namespace tripod::backend::cuda::cudnn
