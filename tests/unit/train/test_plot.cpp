// `tripod plot` (train/plot.h) through the real executable: on hand-made
// JSONL files the loss picture has one polyline per file with one point per
// record, x increasing with the iteration and y a linear, decreasing map of
// the loss (SVG y grows downwards); evaluation records become circles; a
// line that is not JSON is named as file:line. Plus nice_ticks by hand.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "testing/run_tripod.h"
#include "train/plot.h"

namespace {

namespace fs = std::filesystem;

using Result = tripod::testing::TripodRun;
Result run(const std::string& args) { return tripod::testing::run_tripod(args); }

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Curve {
  std::string label;
  std::vector<std::pair<double, double>> pts;
};
std::vector<Curve> polylines(const std::string& svg) {
  std::vector<Curve> out;
  const std::regex re("<polyline class=\"curve\" data-label=\"([^\"]*)\"[^>]* points=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator(); ++it) {
    Curve c{(*it)[1].str(), {}};
    std::istringstream ss((*it)[2].str());
    std::string pt;
    while (ss >> pt) {
      const auto comma = pt.find(',');
      c.pts.emplace_back(std::stod(pt.substr(0, comma)), std::stod(pt.substr(comma + 1)));
    }
    out.push_back(c);
  }
  return out;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

class PlotCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("tripod_plot_" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  fs::path dir;
};

const std::vector<double> kLoss = {4.1, 3.6, 3.0, 2.9, 2.2, 1.7};

TEST_F(PlotCli, LossCurvePointsFollowTheRecords) {
  {
    std::ofstream f(dir / "a.jsonl");
    for (size_t i = 0; i < kLoss.size(); ++i) {
      f << "{\"iteration\":" << (i + 1) * 10 << ",\"lm_loss\":" << kLoss[i] << ",\"tokens_per_sec\":" << 1000 + 10 * i
        << "}\n";
      if (i == 2 || i == 5) f << "{\"iteration\":" << (i + 1) * 10 << ",\"val_loss\":" << kLoss[i] + 0.1 << "}\n";
    }
    std::ofstream g(dir / "b.jsonl");  // a second run, three records
    for (int i = 0; i < 3; ++i) g << "{\"iteration\":" << (i + 1) * 10 << ",\"lm_loss\":" << 5 - i << "}\n";
  }
  const fs::path out = dir / "plots";
  Result r = run("plot --metrics-file " + (dir / "a.jsonl").string() + " " + (dir / "b.jsonl").string() +
                 " --label bf16 --label 'fp32 <ref>' --out-dir " + out.string());
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string svg = slurp(out / "loss.svg");
  ASSERT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u) << svg.substr(0, 100);
  const auto curves = polylines(svg);
  ASSERT_EQ(curves.size(), 2u) << svg;
  EXPECT_EQ(curves[0].label, "bf16");
  EXPECT_EQ(curves[1].label, "fp32 &lt;ref&gt;");  // escaped in the SVG
  ASSERT_EQ(curves[0].pts.size(), kLoss.size());
  ASSERT_EQ(curves[1].pts.size(), 3u);
  const auto& p = curves[0].pts;
  // y = a - b * loss with one b > 0 for every point (0.01 px rounding in the file).
  const double b = (p.back().second - p.front().second) / (kLoss.front() - kLoss.back());
  EXPECT_GT(b, 0);
  for (size_t i = 1; i < p.size(); ++i) {
    EXPECT_GT(p[i].first, p[i - 1].first);    // iterations increase to the right
    EXPECT_GT(p[i].second, p[i - 1].second);  // lower loss is lower on the page
    EXPECT_NEAR(p[i].second - p[0].second, b * (kLoss[0] - kLoss[i]), 0.02);
    EXPECT_NEAR(p[i].first - p[0].first, (p[1].first - p[0].first) * static_cast<double>(i), 0.02);  // equal spacing
  }
  EXPECT_EQ(count(svg, "class=\"marker\""), 2u);  // the two validation records
  EXPECT_EQ(count(svg, "class=\"legend\""), 2u);
  EXPECT_GE(count(svg, "class=\"xtick\""), 3u);
  EXPECT_GE(count(svg, "class=\"ytick\""), 3u);
  // Throughput: only run a has tokens_per_sec.
  const auto tput = polylines(slurp(out / "throughput.svg"));
  ASSERT_EQ(tput.size(), 1u);
  EXPECT_EQ(tput[0].pts.size(), kLoss.size());
  EXPECT_NE(r.output.find("loss.svg"), std::string::npos) << r.output;
}

TEST_F(PlotCli, BadLineNamesFileAndLine) {
  const std::string f = (dir / "bad.jsonl").string();
  std::ofstream(f) << "{\"iteration\":1,\"lm_loss\":3.0}\n\n{\"iteration\":2,\"lm_lo\n";
  Result r = run("plot --metrics-file " + f + " --out-dir " + (dir / "p").string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find(f + ":3"), std::string::npos) << r.output;
}

TEST_F(PlotCli, MissingFileAndLabelCountFail) {
  Result r = run("plot --metrics-file " + (dir / "none.jsonl").string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("none.jsonl"), std::string::npos) << r.output;
  std::ofstream(dir / "a.jsonl") << "{\"iteration\":1,\"lm_loss\":3.0}\n";
  r = run("plot --metrics-file " + (dir / "a.jsonl").string() + " --label x --label y --out-dir " + dir.string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--label"), std::string::npos) << r.output;
}

TEST(NiceTicks, ByHand) {
  EXPECT_EQ(tripod::train::nice_ticks(0, 10), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(tripod::train::nice_ticks(10, 200, 4), (std::vector<double>{50, 100, 150, 200}));
  const auto t = tripod::train::nice_ticks(1.73, 4.12);  // step 0.5
  ASSERT_EQ(t.size(), 5u);
  EXPECT_NEAR(t.front(), 2.0, 1e-12);
  EXPECT_NEAR(t.back(), 4.0, 1e-12);
}

}  // namespace
