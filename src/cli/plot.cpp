// `tripod plot`: loss and throughput pictures from JSONL metrics files
// (`tripod train --metrics-file`). Flags only; the reading and the SVG are
// train/plot.h. docs/monitoring.md.
//   tripod plot --metrics-file bf16.jsonl --metrics-file fp32.jsonl --label bf16 --label fp32 --out-dir plots
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>

#include "base/error.h"
#include "cli/command.h"
#include "train/plot.h"

namespace tripod::cli {
namespace {

int run_plot(int argc, char** argv) {
  CLI::App app{"Loss and throughput plots (SVG) from JSONL metrics files", "tripod plot"};
  std::vector<std::string> files, labels;
  std::string out_dir = ".";
  app.add_option("--metrics-file", files, "JSONL from `tripod train --metrics-file`; repeat for several runs")
      ->required()
      ->take_all();
  app.add_option("--label", labels, "legend name per --metrics-file, in the same order (default: the file name)")
      ->take_all();
  app.add_option("--out-dir", out_dir, "directory for loss.svg and throughput.svg")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  TRIPOD_CHECK_HINT(labels.empty() || labels.size() == files.size(),
                    "give one --label per --metrics-file, or none", "{} --label values for {} --metrics-file values",
                    labels.size(), files.size());
  std::vector<train::MetricsRun> runs;
  for (size_t i = 0; i < files.size(); ++i)
    runs.push_back(train::read_metrics_jsonl(
        files[i], labels.empty() ? std::filesystem::path(files[i]).stem().string() : labels[i]));
  for (const auto& path : train::write_plots(runs, out_dir)) std::printf("wrote %s\n", path.c_str());
  return 0;
}

}  // namespace
}  // namespace tripod::cli

TRIPOD_REGISTER_COMMAND(plot, "plot", "loss and throughput plots (SVG) from --metrics-file JSONL",
                        tripod::cli::run_plot);
