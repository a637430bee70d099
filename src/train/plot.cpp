// Implementation of train/plot.h. The SVG is plain text: a frame, grid lines
// at the ticks, tick labels, axis titles, a <polyline> per series (class
// "curve", data-label = the run), <circle>s (class "marker") for evaluation
// points, and a legend in the top-right corner. SVG's y grows downwards, so
// larger values have smaller y.
#include "train/plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace tripod::train {
namespace {

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// Short tick label: integers plainly, large/small values in compact form.
std::string tick_label(double v, double step) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e6 || a < 1e-3) return fmt::format("{:.3g}", v);
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  return fmt::format("{:.{}f}", v, decimals);
}

bool number_at(const nlohmann::json& j, const char* key, double& out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return false;
  out = it->get<double>();
  return std::isfinite(out);
}

}  // namespace

MetricsRun read_metrics_jsonl(const std::string& path, const std::string& label) {
  std::ifstream in(path);
  TRIPOD_CHECK_HINT(in, "pass an existing JSONL file written by `tripod train --metrics-file`",
                    "cannot open --metrics-file '{}'", path);
  MetricsRun run;
  run.label = label;
  std::string line;
  int64_t lineno = 0, records = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    TRIPOD_CHECK_HINT(j.is_object(), "each line must be one JSON object, as `tripod train --metrics-file` writes",
                      "{}:{}: not a JSON object: '{}'", path, lineno, line.substr(0, 80));
    ++records;
    double it = 0, v = 0;
    if (!number_at(j, "iteration", it)) continue;
    if (number_at(j, "lm_loss", v)) run.lm_loss.emplace_back(it, v);
    if (number_at(j, "val_loss", v)) run.val_loss.emplace_back(it, v);
    if (number_at(j, "tokens_per_sec", v)) run.tokens_per_sec.emplace_back(it, v);
  }
  TRIPOD_CHECK_HINT(records > 0, "pass the JSONL file of a run that logged at least one iteration",
                    "--metrics-file '{}' has no records", path);
  return run;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / std::max(target, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  return ticks;
}

std::string render_svg(const PlotSpec& spec, int width, int height) {
  const double left = 80, right = 20, top = 40, bottom = 60;
  const double pw = width - left - right, ph = height - top - bottom;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : spec.series)
    for (const auto* pts : {&s.line, &s.markers})
      for (const auto& [x, y] : *pts) {
        x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
      }
  if (!std::isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) {
    const double pad = y0 != 0 ? std::fabs(y0) * 0.05 : 1;
    y0 -= pad, y1 += pad;
  }
  // The y range is widened to whole ticks so the curve never touches the frame.
  std::vector<double> yt = nice_ticks(y0, y1);
  const double ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
  y0 = std::min(y0, std::floor(y0 / ystep + 1e-9) * ystep);
  y1 = std::max(y1, std::ceil(y1 / ystep - 1e-9) * ystep);
  yt = nice_ticks(y0, y1);
  const std::vector<double> xt = nice_ticks(x0, x1);
  auto sx = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto sy = [&](double y) { return top + (y1 - y) / (y1 - y0) * ph; };

  std::string o = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, height, width, height);
  o += fmt::format("<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"16\">{}</text>\n", left + pw / 2,
                   escape(spec.title));
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1;
  for (double t : xt) {
    o += fmt::format("<line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\" stroke=\"#ddd\"/>\n", sx(t), top,
                     top + ph);
    o += fmt::format("<text class=\"xtick\" x=\"{:.2f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", sx(t),
                     top + ph + 18, tick_label(t, xstep));
  }
  for (double t : yt) {
    o += fmt::format("<line x1=\"{0}\" y1=\"{1:.2f}\" x2=\"{2}\" y2=\"{1:.2f}\" stroke=\"#ddd\"/>\n", left, sy(t),
                     left + pw);
    o += fmt::format("<text class=\"ytick\" x=\"{}\" y=\"{:.2f}\" text-anchor=\"end\">{}</text>\n", left - 6,
                     sy(t) + 4, tick_label(t, ystep));
  }
  o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>\n", left,
                   top, pw, ph);
  o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", left + pw / 2, height - 15,
                   escape(spec.x_label));
  o += fmt::format("<text x=\"18\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {0})\">{1}</text>\n",
                   top + ph / 2, escape(spec.y_label));
  for (size_t i = 0; i < spec.series.size(); ++i) {
    const auto& s = spec.series[i];
    const char* color = kColors[i % std::size(kColors)];
    if (!s.line.empty()) {
      o += fmt::format("<polyline class=\"curve\" data-label=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" "
                       "points=\"",
                       escape(s.label), color);
      for (size_t k = 0; k < s.line.size(); ++k)
        o += fmt::format("{}{:.2f},{:.2f}", k ? " " : "", sx(s.line[k].first), sy(s.line[k].second));
      o += "\"/>\n";
    }
    for (const auto& [x, y] : s.markers)
      o += fmt::format("<circle class=\"marker\" data-label=\"{}\" cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"4\" fill=\"white\" "
                       "stroke=\"{}\" stroke-width=\"2\"/>\n",
                       escape(s.label), sx(x), sy(y), color);
    // Legend entry, top right inside the frame.
    const double ly = top + 16 + 18 * static_cast<double>(i), lx = left + pw - 170;
    o += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"3\"/>\n", lx, ly - 4,
                     lx + 24, ly - 4, color);
    o += fmt::format("<text class=\"legend\" x=\"{}\" y=\"{}\">{}</text>\n", lx + 30, ly, escape(s.label));
  }
  o += "</svg>\n";
  return o;
}

std::vector<std::string> write_plots(const std::vector<MetricsRun>& runs, const std::string& out_dir) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  TRIPOD_CHECK_HINT(!ec, "pass an --out-dir that can be created", "cannot create --out-dir '{}': {}", out_dir,
                    ec.message());
  PlotSpec loss{"Training loss", "iteration", "lm loss", {}};
  PlotSpec tput{"Throughput", "iteration", "tokens/s", {}};
  bool any_val = false, any_tput = false;
  for (const auto& r : runs) {
    loss.series.push_back({r.label, r.lm_loss, r.val_loss});
    tput.series.push_back({r.label, r.tokens_per_sec, {}});
    any_val |= !r.val_loss.empty();
    any_tput |= !r.tokens_per_sec.empty();
  }
  if (any_val) loss.title += " (circles: validation)";
  std::vector<std::pair<std::string, const PlotSpec*>> todo = {{"loss.svg", &loss}};
  if (any_tput) todo.emplace_back("throughput.svg", &tput);
  std::vector<std::string> written;
  for (const auto& [name, spec] : todo) {
    const std::string path = (std::filesystem::path(out_dir) / name).string();
    std::ofstream f(path);
    f << render_svg(*spec);
    f.close();
    TRIPOD_CHECK_HINT(f, "check that --out-dir is writable", "cannot write '{}'", path);
    written.push_back(path);
  }
  return written;
}

}  // namespace tripod::train
