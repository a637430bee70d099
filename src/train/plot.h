// `tripod plot`: loss and throughput pictures (SVG, written by hand) from
// one or more JSONL metrics files (--metrics-file, keys in train/metrics.h).
// One labelled curve per file, so runs can be compared (bf16 vs fp32, ...):
//   loss.svg       lm_loss vs iteration (polyline) + val_loss (circles)
//   throughput.svg tokens_per_sec vs iteration
// docs/monitoring.md.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tripod::train {

using PlotPoint = std::pair<double, double>;  // (x, y)

struct MetricsRun {
  std::string label;
  std::vector<PlotPoint> lm_loss, val_loss, tokens_per_sec;  // x = iteration
};

// Reads a metrics JSONL file; a line that is not a JSON object fails naming
// file:line. Records with a null/missing value (NaN loss) are left out.
MetricsRun read_metrics_jsonl(const std::string& path, const std::string& label);

struct PlotSeries {
  std::string label;
  std::vector<PlotPoint> line;     // drawn as one <polyline>
  std::vector<PlotPoint> markers;  // drawn as <circle>s in the same colour
};

struct PlotSpec {
  std::string title, x_label, y_label;
  std::vector<PlotSeries> series;
};

// Axes with ticks and tick labels, one polyline per series, a legend.
std::string render_svg(const PlotSpec& spec, int width = 800, int height = 500);

// "Nice" tick positions (steps of 1, 2 or 5 x 10^k) covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

// Writes loss.svg and throughput.svg (the latter only when a run has
// throughput records) into out_dir; returns the paths written.
std::vector<std::string> write_plots(const std::vector<MetricsRun>& runs, const std::string& out_dir);

}  // namespace tripod::train
