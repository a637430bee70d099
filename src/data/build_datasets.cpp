// build_gpt_datasets: picks mock data or the indexed datasets named by
// --data-path, with the train/valid/test split.
#include <algorithm>

#include "base/error.h"
#include "base/log.h"
#include "data/dataset.h"
#include "data/mock_dataset.h"

namespace tripod::data {

// Defined in gpt_dataset.cpp when the indexed-dataset reader is built.
DatasetSplits build_indexed_gpt_datasets(const DataConfig& config);

DatasetSplits build_gpt_datasets(const DataConfig& config) {
  if (config.mock_data) {
    DatasetSplits s;
    // Disjoint index ranges (different seeds) per split.
    s.train = std::make_unique<MockGPTDataset>(std::max<int64_t>(config.train_samples, 1),
                                               config.seq_length, config.vocab_size, config.seed);
    if (config.valid_samples > 0)
      s.valid = std::make_unique<MockGPTDataset>(config.valid_samples, config.seq_length,
                                                 config.vocab_size, config.seed + 1);
    if (config.test_samples > 0)
      s.test = std::make_unique<MockGPTDataset>(config.test_samples, config.seq_length,
                                                config.vocab_size, config.seed + 2);
    log::info("data: {}", s.train->describe());
    return s;
  }
  TRIPOD_CHECK_HINT(!config.data_path.empty(), "pass --data-path PREFIX or --mock-data --vocab-size N",
                    "no training data given");
  return build_indexed_gpt_datasets(config);
}

}  // namespace tripod::data
