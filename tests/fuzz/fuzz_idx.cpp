// Fuzz target: Megatron's .idx/.bin reader (data/indexed_dataset.h).
// Input: join2(.idx bytes, .bin bytes). After the reader accepts a pair,
// every sequence, document index and token must be readable in bounds (the
// reader's contract), so the target reads them all.
#include <vector>

#include "data/indexed_dataset.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tripod;
  const auto [idx, bin] = fuzz::split2(data, size);
  const std::string prefix = fuzz::scratch_dir() + "/ds";
  fuzz::write_file(data::idx_path(prefix), idx);
  fuzz::write_file(data::bin_path(prefix), bin);
  fuzz::run_input([&] {
    const data::IndexedDataset ds(prefix);
    std::vector<int32_t> buf;
    int64_t tokens = 0;
    for (int64_t s = 0; s < ds.num_sequences(); ++s) {
      const int32_t n = ds.length(s);
      buf.resize(size_t(n));
      if (n > 0) ds.read(s, 0, n, buf.data());
      if (n > 1) ds.read(s, n / 2, n - n / 2, buf.data());
      tokens += n;
    }
    TRIPOD_CHECK(tokens == ds.num_tokens(), "fuzz: token count {} != num_tokens() {}", tokens, ds.num_tokens());
    for (int64_t d = 0; d <= ds.num_documents(); ++d) (void)ds.document_index(d);
    (void)ds.max_token_id();
  });
  return 0;
}
