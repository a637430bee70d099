// The restricted unpickler (interop/torch_pickle.h) on hand-made pickles:
// malformed input and self-containing containers are errors naming the file.
#include <gtest/gtest.h>

#include <string>

#include "base/error.h"
#include "interop/torch_pickle.h"

namespace {

// Found by fuzzing the unpickler (tests/fuzz/fuzz_torch_pickle.cpp): a text
// opcode with a malformed number escaped as std::invalid_argument, and a list
// appended into itself made a cycle of shared_ptrs (never freed; repr() and
// the importer would recurse forever). Both are now errors naming the file.
TEST(TorchPickle, MalformedAndCyclicPicklesAreErrors) {
  auto fails_with = [](const std::string& pkl, const std::string& what) {
    try {
      tripod::interop::unpickle(reinterpret_cast<const uint8_t*>(pkl.data()), pkl.size(), "x.pkl");
      ADD_FAILURE() << "accepted: " << what;
    } catch (const tripod::Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("x.pkl"), std::string::npos) << e.what();
    }
  };
  fails_with(std::string("\x80\x02]q\x00gx\n.", 9), "malformed number");  // GET with memo "x"
  fails_with(std::string("\x80\x02]q\x00h\x00" "a.", 9), "contain itself");  // l = []; l.append(l)
  fails_with(std::string("\x80\x02}q\x00K\x01h\x00s.", 10), "contain itself");  // d = {}; d[1] = d
  const std::string ok("\x80\x02]q\x00]q\x01h\x01\x86q\x02" "a.", 15);  // l = []; m = []; l.append((m, m))
  EXPECT_EQ(tripod::interop::unpickle(reinterpret_cast<const uint8_t*>(ok.data()), ok.size(), "ok.pkl")->items.size(), 1u);
}

}  // namespace
