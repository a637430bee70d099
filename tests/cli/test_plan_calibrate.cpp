// `tripod plan --calibrate` and `--op-times` through the real executable:
// the calibration measures every op of the listed layouts on this machine's
// device (the CPU here), writes the cache keyed by device and version, a
// later plan reads it, and a cache of another version or a broken one is
// ignored with a note naming it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "testing/run_tripod.h"

namespace {

const std::string kModel =
    "plan --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --vocab-size 500 "
    "--global-batch-size 8 --gpus-per-node 2 --gpu-memory-gb 16 --json --top 5 ";

nlohmann::json plan_json(const std::string& args, const std::string& env, std::string* text = nullptr) {
  const auto out = tripod::testing::run_tripod(kModel + args, env);
  if (text) *text = out.output;
  EXPECT_EQ(out.code, 0) << out.output;
  const auto start = out.output.find("{\n");
  if (start == std::string::npos) {
    ADD_FAILURE() << out.output;
    return {};
  }
  return nlohmann::json::parse(out.output.substr(start));
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(PlanCalibrate, MeasuresCachesAndReuses) {
  const std::string dir = ::testing::TempDir() + "plan_calibrate";
  std::filesystem::remove_all(dir);
  const std::string env = "TRIPOD_CACHE_DIR=" + dir;
  const std::string cache = dir + "/plan/cpu.json";

  nlohmann::json j = plan_json("--calibrate --device cpu", env);
  ASSERT_TRUE(std::filesystem::exists(cache));
  EXPECT_NE(j["op_times"].get<std::string>().find("measured on this machine"), std::string::npos) << j["op_times"];
  ASSERT_FALSE(j["layouts"].empty());
  for (const auto& l : j["layouts"]) {
    EXPECT_EQ(l["op_times"]["measured"], l["op_times"]["ops"]) << l.dump();  // every op of a listed layout
    EXPECT_TRUE(l["time_s"]["compute_from_op_times"].get<bool>());
    EXPECT_GT(l["time_s"]["compute"].get<double>(), 0);
    EXPECT_GT(l["time_s"]["optimizer"].get<double>(), 0);
  }
  const auto file = nlohmann::json::parse(read(cache));
  EXPECT_EQ(file["format"], 1);
  EXPECT_EQ(file["device"], "cpu");
  EXPECT_FALSE(file["tripod_version"].get<std::string>().empty());
  EXPECT_FALSE(file["measured_seconds"].empty());
  EXPECT_TRUE(file["fits"].contains("linear") && file["fits"].contains("memory")) << file["fits"].dump();

  // Without --calibrate the cache of this machine's device is used as is.
  const nlohmann::json again = plan_json("", env);
  EXPECT_NE(again["op_times"].get<std::string>().find("measured on this machine"), std::string::npos);
  EXPECT_EQ(again["layouts"][0]["time_s"]["compute"], j["layouts"][0]["time_s"]["compute"]);

  // A cache of another tripod version is ignored, and the note says so.
  auto other = file;
  other["tripod_version"] = "0.0.1+gfeedbeef";
  std::ofstream(cache) << other.dump();
  std::string text;
  const nlohmann::json stale = plan_json("", env, &text);
  EXPECT_NE(stale["op_times"].get<std::string>().find("shipped"), std::string::npos) << stale["op_times"];
  EXPECT_NE(text.find("0.0.1+gfeedbeef"), std::string::npos) << text;

  // A broken cache is named and does not stop the plan; --calibrate rewrites it.
  std::ofstream(cache) << "{\"format\": 1, \"dev";
  const nlohmann::json broken = plan_json("", env, &text);
  EXPECT_NE(text.find(cache), std::string::npos) << text;
  plan_json("--calibrate --device cpu", env);
  EXPECT_EQ(nlohmann::json::parse(read(cache))["device"], "cpu");
}

// --fp8-format: the calibration times the FP8 linears as the model runs
// them (the casts and FP8 GEMMs of backend/ops.h, emulated on the CPU) and
// the plan's compute uses them: every op measured, and the FP8 op keys in
// the cache.
TEST(PlanCalibrate, Fp8LinearsAreMeasured) {
  const std::string dir = ::testing::TempDir() + "plan_calibrate_fp8";
  std::filesystem::remove_all(dir);
  const std::string env = "TRIPOD_CACHE_DIR=" + dir;
  const nlohmann::json j = plan_json("--calibrate --device cpu --fp8-format hybrid", env);
  ASSERT_FALSE(j["layouts"].empty());
  for (const auto& l : j["layouts"]) {
    EXPECT_EQ(l["op_times"]["measured"], l["op_times"]["ops"]) << l.dump();
    EXPECT_TRUE(l["time_s"]["compute_from_op_times"].get<bool>());
  }
  const auto file = nlohmann::json::parse(read(dir + "/plan/cpu.json"));
  int fwd = 0, bwd = 0, cast = 0;
  for (const auto& [key, seconds] : file["measured_seconds"].items()) {
    fwd += key.rfind("fp8_linear_fwd ", 0) == 0;
    bwd += key.rfind("fp8_linear_bwd ", 0) == 0;
    cast += key.rfind("fp8_weight_cast ", 0) == 0;
    EXPECT_GT(seconds.get<double>(), 0) << key;
  }
  EXPECT_GT(fwd, 0);
  EXPECT_GT(bwd, 0);
  EXPECT_GT(cast, 0);
  EXPECT_TRUE(file["fits"].contains("fp8_linear")) << file["fits"].dump();
}

TEST(PlanCalibrate, OpTimesChoices) {
  const std::string env = "TRIPOD_CACHE_DIR=" + ::testing::TempDir() + "plan_calibrate_none";
  nlohmann::json j = plan_json("--op-times assumed", env);
  EXPECT_EQ(j["op_times"], "assumed");
  EXPECT_FALSE(j["layouts"][0]["time_s"]["compute_from_op_times"].get<bool>());
  j = plan_json("--op-times h200", env);
  EXPECT_NE(j["op_times"].get<std::string>().find("H200"), std::string::npos);
  EXPECT_TRUE(j["layouts"][0]["time_s"]["compute_from_op_times"].get<bool>());

  const auto out = tripod::testing::run_tripod(kModel + "--op-times /nonexistent/ops.json", env);
  EXPECT_NE(out.code, 0);
  EXPECT_NE(out.output.find("/nonexistent/ops.json"), std::string::npos) << out.output;
}

}  // namespace
