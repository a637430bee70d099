// cuDNN backend graph builder (see cudnn_graph.h). The library is opened with
// dlopen and every entry point is looked up by name; nothing links against
// libcudnn, so a binary built here runs on hosts without cuDNN.
#include "backend/cuda/cudnn_graph.h"

#include <dlfcn.h>

#include <map>
#include <mutex>

namespace tripod::backend::cuda::cudnn {

#if TRIPOD_HAVE_CUDNN_GRAPH

namespace {

struct Api {
  size_t (*GetVersion)();
  const char* (*GetErrorString)(cudnnStatus_t);
  void (*GetLastErrorString)(char*, size_t);
  cudnnStatus_t (*Create)(cudnnHandle_t*);
  cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t);
  cudnnStatus_t (*BackendCreateDescriptor)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t*);
  cudnnStatus_t (*BackendDestroyDescriptor)(cudnnBackendDescriptor_t);
  cudnnStatus_t (*BackendFinalize)(cudnnBackendDescriptor_t);
  cudnnStatus_t (*BackendSetAttribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t, const void*);
  cudnnStatus_t (*BackendGetAttribute)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t, int64_t*, void*);
  cudnnStatus_t (*BackendExecute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
};

struct Loaded {
  Api api{};
  bool ok = false;
  std::string why;
  size_t version = 0;
};

template <typename F> bool sym(void* lib, const char* name, F& f, std::string& why) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f) why = std::string("symbol ") + name + " missing";
  return f != nullptr;
}

const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded r;
    void* lib = nullptr;
    for (const char* name : {"libcudnn.so.9", "libcudnn_graph.so.9"}) {
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib) break;
    }
    if (!lib) {
      const char* e = dlerror();
      r.why = std::string("libcudnn.so.9 not found (") + (e ? e : "dlopen failed") + ")";
      return r;
    }
    Api& a = r.api;
    bool ok = sym(lib, "cudnnGetVersion", a.GetVersion, r.why) &&
              sym(lib, "cudnnGetErrorString", a.GetErrorString, r.why) &&
              sym(lib, "cudnnGetLastErrorString", a.GetLastErrorString, r.why) &&
              sym(lib, "cudnnCreate", a.Create, r.why) && sym(lib, "cudnnSetStream", a.SetStream, r.why) &&
              sym(lib, "cudnnBackendCreateDescriptor", a.BackendCreateDescriptor, r.why) &&
              sym(lib, "cudnnBackendDestroyDescriptor", a.BackendDestroyDescriptor, r.why) &&
              sym(lib, "cudnnBackendFinalize", a.BackendFinalize, r.why) &&
              sym(lib, "cudnnBackendSetAttribute", a.BackendSetAttribute, r.why) &&
              sym(lib, "cudnnBackendGetAttribute", a.BackendGetAttribute, r.why) &&
              sym(lib, "cudnnBackendExecute", a.BackendExecute, r.why);
    if (!ok) return r;
    r.version = a.GetVersion();
    if (r.version < 90000 || r.version >= 100000) {
      r.why = "cuDNN " + std::to_string(r.version) + " loaded, version 9 required";
      return r;
    }
    r.ok = true;
    return r;  // the library stays open for the life of the process
  }();
  return l;
}

const Api& api() { return loaded().api; }

[[noreturn]] void throw_status(cudnnStatus_t s, const std::string& what) {
  char last[512] = {0};
  api().GetLastErrorString(last, sizeof(last));
  throw GraphError(what + ": " + api().GetErrorString(s) + (last[0] ? std::string(" (") + last + ")" : ""));
}

void check(cudnnStatus_t s, const std::string& what) {
  if (s != CUDNN_STATUS_SUCCESS) throw_status(s, what);
}

}  // namespace

bool available(std::string* why) {
  const Loaded& l = loaded();
  if (!l.ok && why) *why = l.why;
  return l.ok;
}

size_t version() { return loaded().ok ? loaded().version : 0; }

cudnnHandle_t handle_for_current_device() {
  static std::mutex mu;
  static std::map<int, cudnnHandle_t> handles;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) throw GraphError("cudaGetDevice failed");
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(dev);
  if (it != handles.end()) return it->second;
  cudnnHandle_t h = nullptr;
  check(api().Create(&h), "cudnnCreate");
  handles.emplace(dev, h);  // kept for the life of the process
  return h;
}

// ---- Desc ----

Desc::Desc(cudnnBackendDescriptorType_t type) {
  check(api().BackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor(" + std::to_string(int(type)) + ")");
}

Desc::~Desc() {
  if (d_) api().BackendDestroyDescriptor(d_);
}

void Desc::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
               const void* values) {
  check(api().BackendSetAttribute(d_, name, type, count, values),
        "cudnnBackendSetAttribute(" + std::to_string(int(name)) + ")");
}

void Desc::set_desc(cudnnBackendAttributeName_t name, const Desc& other) {
  cudnnBackendDescriptor_t d = other.get();
  set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
}

void Desc::finalize(const char* what) { check(api().BackendFinalize(d_), std::string("finalize ") + what); }

// ---- Graph ----

const Desc& Graph::t(int64_t uid) const {
  if (uid < 1 || uid > int64_t(tensors_.size())) throw GraphError("unknown tensor uid " + std::to_string(uid));
  return *tensors_[uid - 1];
}

int64_t Graph::tensor(const TensorSpec& s) {
  auto d = std::make_unique<Desc>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t uid = int64_t(tensors_.size()) + 1, align = 16;
  const bool virt = s.is_virtual, byval = s.by_value;
  d->set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &s.dtype);
  d->set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, int64_t(s.dims.size()), s.dims.data());
  d->set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, int64_t(s.strides.size()), s.strides.data());
  d->set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  d->set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  d->set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
  if (byval) d->set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval);
  d->finalize("tensor");
  tensors_.push_back(std::move(d));
  return uid;
}

int64_t Graph::scalar(float value) {
  int64_t uid = tensor({CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true});
  scalars_.emplace_back(uid, std::make_unique<float>(value));
  return uid;
}

void Graph::matmul(int64_t a, int64_t b, int64_t c) {
  auto mm = std::make_unique<Desc>(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  mm->set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
  mm->finalize("matmul descriptor");
  auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, t(a));
  op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, t(b));
  op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, t(c));
  op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, *mm);
  op->finalize("matmul operation");
  ops_.push_back(op.get());
  keep_.push_back(std::move(mm));
  keep_.push_back(std::move(op));
}

void Graph::pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t y, int64_t b, int64_t tt,
                      cudnnDataType_t math, int64_t axis) {
  auto pw = std::make_unique<Desc>(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw->set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  pw->set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
  if (axis >= 0) pw->set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
  pw->finalize("pointwise descriptor");
  auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, *pw);
  op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, t(x));
  if (b) op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, t(b));
  if (tt) op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t(tt));
  op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, t(y));
  op->finalize("pointwise operation");
  ops_.push_back(op.get());
  keep_.push_back(std::move(pw));
  keep_.push_back(std::move(op));
}

void Graph::reduction(cudnnReduceTensorOp_t rop, int64_t x, int64_t y) {
  auto rd = std::make_unique<Desc>(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  rd->set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
  rd->set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &rop);
  rd->finalize("reduction descriptor");
  auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op->set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, t(x));
  op->set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, t(y));
  op->set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, *rd);
  op->finalize("reduction operation");
  ops_.push_back(op.get());
  keep_.push_back(std::move(rd));
  keep_.push_back(std::move(op));
}

void Graph::reshape(int64_t x, int64_t y) {
  auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op->set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, t(x));
  op->set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, t(y));
  op->finalize("reshape operation");
  ops_.push_back(op.get());
  keep_.push_back(std::move(op));
}

void Graph::build(cudnnHandle_t handle) {
  graph_ = std::make_unique<Desc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> ops;
  for (Desc* d : ops_) ops.push_back(d->get());
  graph_->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops.size()), ops.data());
  if (handle) graph_->set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  graph_->finalize("operation graph");

  std::string tried;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, *graph_);
    heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    try {
      heur.finalize("engine heuristics");
    } catch (const GraphError& e) {
      tried += std::string(tried.empty() ? "" : "; ") + e.what();
      continue;
    }
    int64_t n = 0;
    check(api().BackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                    0, &n, nullptr),
          "engine heuristics result count");
    std::vector<std::unique_ptr<Desc>> cfgs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < n; ++i) {
      cfgs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
      raw.push_back(cfgs.back()->get());
    }
    int64_t got = 0;
    if (n > 0)
      check(api().BackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                      n, &got, raw.data()),
            "engine heuristics results");
    for (int64_t i = 0; i < got; ++i) {
      try {
        auto plan = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
        plan->set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *cfgs[i]);
        plan->finalize("execution plan");
        int64_t ws = 0, cnt = 0;
        check(api().BackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                        &cnt, &ws),
              "plan workspace size");
        // The engine's global index names the kernel family in logs.
        cudnnBackendDescriptor_t eng = nullptr;
        auto engine = std::make_unique<Desc>(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
        eng = engine->get();
        int64_t idx = -1;
        if (api().BackendGetAttribute(cfgs[i]->get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                      &cnt, &eng) == CUDNN_STATUS_SUCCESS)
          api().BackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, &idx);
        engine_note_ = std::string(mode == CUDNN_HEUR_MODE_A ? "heuristics A" : "fallback") + ", engine " +
                       std::to_string(idx) + " (config " + std::to_string(i) + " of " + std::to_string(got) + ")";
        workspace_bytes_ = ws;
        plan_ = std::move(plan);
        keep_.push_back(std::move(engine));
        return;
      } catch (const GraphError& e) {
        tried += std::string(tried.empty() ? "" : "; ") + e.what();
      }
    }
    if (got == 0) tried += std::string(tried.empty() ? "" : "; ") + "no engine configs";
  }
  throw GraphError("no execution plan: " + (tried.size() > 600 ? tried.substr(0, 600) + "..." : tried));
}

void Graph::execute(cudnnHandle_t handle, cudaStream_t stream, const std::vector<int64_t>& uids,
                    const std::vector<void*>& ptrs, void* workspace) const {
  if (!plan_) throw GraphError("execute before build");
  std::vector<int64_t> u = uids;
  std::vector<void*> p = ptrs;
  for (const auto& [uid, value] : scalars_) {
    u.push_back(uid);
    p.push_back(value.get());
  }
  check(api().SetStream(handle, stream), "cudnnSetStream");
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(u.size()), u.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(p.size()), p.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize("variant pack");
  check(api().BackendExecute(handle, plan_->get(), pack.get()), "cudnnBackendExecute");
}

#else  // !TRIPOD_HAVE_CUDNN_GRAPH

bool available(std::string* why) {
  if (why) *why = "built without cudnn_graph.h";
  return false;
}
size_t version() { return 0; }

#endif

}  // namespace tripod::backend::cuda::cudnn
