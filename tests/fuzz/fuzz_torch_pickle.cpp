// Fuzz target: the restricted unpickler (interop/torch_pickle.h unpickle()).
// Input: the bytes of a data.pkl. An accepted pickle's value is printed
// (repr) and walked as the Megatron importer walks it.
#include "interop/torch_pickle.h"
#include "fuzz_common.h"

namespace {
void walk(const tripod::interop::PyValue& v, int depth, int64_t* nodes) {
  if (depth > 200 || ++*nodes > 100000) return;
  for (const auto& it : v.items)
    if (it) walk(*it, depth + 1, nodes);
  for (const auto& [k, val] : v.dict) {
    if (k) walk(*k, depth + 1, nodes);
    if (val) walk(*val, depth + 1, nodes);
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tripod;
  fuzz::run_input([&] {
    const interop::PyPtr v = interop::unpickle(data, size, "fuzz.pkl");
    TRIPOD_CHECK(v != nullptr, "fuzz: unpickle returned null");
    (void)v->repr();
    (void)v->get("model");
    int64_t nodes = 0;
    walk(*v, 0, &nodes);
  });
  return 0;
}
