// `tripod plan`: list the TP x PP x DP layouts (with micro-batch, virtual
// pipeline, recompute, sequence parallel, distributed optimizer) that fit
// the GPUs, best first, with predicted memory per GPU and step time, and why.
// Flags only; the models and the search are plan/search.h. docs/plan.md.
//   tripod plan --num-layers 40 --hidden-size 5120 --num-attention-heads 40 --seq-length 2048
//               --global-batch-size 512 --bf16 --nnodes 1 --gpus-per-node 8
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>

#include "base/error.h"
#include "cli/command.h"
#include "cli/default_device.h"
#include "cli/device.h"
#include "cli/table_flags.h"
#include "plan/calibrate.h"
#include "plan/gpu_specs.h"
#include "plan/search.h"

namespace tripod::cli {
namespace {

constexpr double kGiB = double(1ll << 30);

nlohmann::json to_json(const plan::Candidate& c) {  // megatron_flags added by the caller
  const auto& l = c.layout;
  return {{"tensor_model_parallel_size", l.tp},
          {"pipeline_model_parallel_size", l.pp},
          {"data_parallel_size", l.dp},
          {"context_parallel_size", l.cp},
          {"expert_model_parallel_size", l.ep},
          {"virtual_pipeline_size", l.vpp},
          {"micro_batch_size", l.micro_batch},
          {"global_batch_size", l.global_batch},
          {"num_microbatches", l.num_microbatches()},
          {"sequence_parallel", l.sp()},
          {"use_distributed_optimizer", l.distributed_optimizer},
          {"data_parallel_sharding_strategy", l.zero_stage == 3   ? "optim_grads_params"
                                              : l.zero_stage == 2 ? "optim_grads"
                                              : l.distributed_optimizer ? "optim"
                                                                        : "no_shard"},
          {"recompute", plan::to_string(l.recompute)},
          {"memory_gib",
           {{"total", c.mem.total() / kGiB},
            {"allocator_peak", c.mem.allocator_peak() / kGiB},
            {"model_states", c.mem.model_states / kGiB},
            {"activations", c.mem.activations / kGiB},
            {"workspace", c.mem.workspace / kGiB},
            {"reserved", c.mem.reserved / kGiB},
            {"params_per_gpu", c.mem.params_per_gpu},
            {"bytes_per_param", c.mem.bytes_per_param},
            {"busiest_stage", c.mem.stage}}},
          {"time_s",
           {{"step", c.time.total()},
            {"compute", c.time.compute},
            {"tp_comm", c.time.tp_comm},
            {"bubble", c.time.bubble},
            {"pp_comm", c.time.pp_comm},
            {"dp_comm", c.time.dp_comm},
            {"optimizer", c.time.optimizer},
            {"cp_comm", c.time.cp_comm},
            {"ep_comm", c.time.ep_comm},
            {"compute_from_op_times", c.time.compute_from_op_times}}},
          {"tokens_per_second", c.tokens_per_second},
          {"mfu", c.mfu},
          {"reasons", c.reasons}};
}


void print_table(const config::GptConfig& m, const plan::Machine& mc, const plan::PlanResult& r, int top,
                 plan::MemoryModelKind mm) {
  std::printf("# model: %lld layers, hidden %lld, %lld heads, ffn %lld, seq %lld, vocab %lld (padded at tp1: %lld), "
              "%.3g B params\n",
              (long long)m.num_layers, (long long)m.hidden_size, (long long)m.num_attention_heads,
              (long long)m.ffn_hidden_size, (long long)m.seq_length, (long long)m.vocab_size,
              (long long)m.padded_vocab_size(1), double(m.num_parameters(m.padded_vocab_size(1))) / 1e9);
  if (m.group_query_attention || m.swiglu || m.untie_embeddings_and_output_weights || !m.add_bias_linear ||
      m.rmsnorm() || !m.learned_positions())
    std::printf("# options: %lld query groups, %s, %s MLP, %s output layer, %s, %s positions\n",
                (long long)m.query_groups(), m.rmsnorm() ? "RMSNorm" : "LayerNorm", m.swiglu ? "SwiGLU" : "GELU",
                m.untie_embeddings_and_output_weights ? "untied" : "tied", m.add_bias_linear ? "biases" : "no biases",
                m.learned_positions() ? "learned" : "no learned");
  std::printf("# machine: %d node(s) x %d GPUs, %.0f GiB, %.0f TFLOP/s peak at MFU %.2f, links %.0f GB/s intra, "
              "%.0f GB/s inter\n",
              mc.nnodes, mc.gpus_per_node, mc.gpu_memory_gb, mc.peak_tflops, mc.assumed_mfu, mc.intra_node_bw_gbs,
              mc.inter_node_bw_gbs);
  std::printf("# memory model: %s\n", mm == plan::MemoryModelKind::kTripod
                                             ? "tripod (what tripod allocates: flash-style activations, its buffers, "
                                               "1 GiB CUDA context)"
                                             : "megatron (Korthikanti et al.: attention scores stored, 16-bit)");
  std::printf("# %lld layouts obey the rules, %zu fit, %lld do not fit\n", (long long)r.valid_layouts, r.fits.size(),
              (long long)r.too_big);
  for (const auto& n : r.notes) std::printf("# %s\n", n.c_str());
  if (r.fits.empty()) return;
  // A CP column only when the search went to context parallelism.
  const bool cp = std::any_of(r.fits.begin(), r.fits.end(), [](const plan::Candidate& c) { return c.layout.cp > 1; });
  // An EP column when a listed layout splits the experts.
  const bool ep = std::any_of(r.fits.begin(), r.fits.end(), [](const plan::Candidate& c) { return c.layout.ep > 1; });
  std::printf("\n%3s %3s %3s %4s %3s %4s %4s %2s %2s %-9s %8s %8s %8s %9s %11s %5s%s%s\n", "#", "TP", "PP", "DP", "VPP",
              "MBS", "GA", "SP", "DO", "recompute", "mem GiB", "states", "acts", "step s", "tokens/s", "MFU",
              cp ? "  CP" : "", ep ? "  EP" : "");
  const int n = std::min<int>(top, int(r.fits.size()));
  for (int i = 0; i < n; ++i) {
    const auto& c = r.fits[i];
    const auto& l = c.layout;
    std::printf("%3d %3d %3d %4d %3d %4lld %4lld %2s %2s %-9s %8.1f %8.1f %8.1f %9.3f %11.0f %5.2f%s%s\n", i + 1, l.tp,
                l.pp, l.dp, l.vpp, (long long)l.micro_batch, (long long)l.num_microbatches(), l.sp() ? "y" : "-",
                l.zero_stage >= 2 ? (l.zero_stage == 3 ? "z3" : "z2") : l.distributed_optimizer ? "y" : "-",
                plan::to_string(l.recompute).c_str(), c.mem.total() / kGiB,
                c.mem.model_states / kGiB, c.mem.activations / kGiB, c.time.total(), c.tokens_per_second, c.mfu,
                cp ? fmt::format(" {:3d}", l.cp).c_str() : "", ep ? fmt::format(" {:3d}", l.ep).c_str() : "");
  }
  std::printf("\nwhy (top %d):\n", std::min(n, 3));
  for (int i = 0; i < std::min(n, 3); ++i) {
    const auto& c = r.fits[i];
    std::printf("%d. %s\n", i + 1, plan::megatron_flags(m, c.layout).c_str());
    for (const auto& why : c.reasons) std::printf("     - %s\n", why.c_str());
    std::printf("     - step %.3f s = compute %.3f + optimizer %.3f + TP %.3f + bubble %.3f + PP p2p %.3f + DP %.3f%s\n",
                c.time.total(), c.time.compute, c.time.optimizer, c.time.tp_comm, c.time.bubble, c.time.pp_comm,
                c.time.dp_comm, (std::string(c.layout.cp > 1 ? fmt::format(" + CP ring {:.3f}", c.time.cp_comm) : "") +
                                 (c.layout.ep > 1 ? fmt::format(" + EP all-to-all {:.3f}", c.time.ep_comm) : ""))
                                    .c_str());
  }
}

std::vector<plan::Recompute> parse_recompute_list(const std::string& s) {
  std::vector<plan::Recompute> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(plan::recompute_from_string(item));
  TRIPOD_CHECK(!out.empty(), "--recompute-search needs at least one of none, selective, full");
  return out;
}

int run_plan(int argc, char** argv) {
  CLI::App app{"Choose a parallel layout: the TP x PP x DP layouts that fit, best first, with memory, step time and "
               "why.\nExample: tripod plan --num-layers 40 --hidden-size 5120 --num-attention-heads 40 "
               "--seq-length 2048 --global-batch-size 512 --bf16 --gpus-per-node 8"};
  // The model as `tripod train` takes it (config/gpt_config.h), finalized below.
  config::GptConfig m;
  m.vocab_size = 50257;
  plan::Machine mc;
  plan::SearchOptions o;
  bool bf16 = false, fp16 = false, fp32 = false, json = false, sp_flag = false, no_sp = false, dopt = false,
       no_dopt = false, recompute_activations = false;
  std::string cp_comm_type = "p2p";
  std::string granularity, recompute_search = "none,selective,full", vpp_list = "1,2,4";
  int layers_per_virtual_stage = 0, top = 10;
  // The model flags, as tripod train takes them (train/flag_table.h), into
  // plan's defaults (the GPT-2 vocabulary).
  train::TrainArgs model_args;
  model_args.model = m;
  TableFlags model_flags;
  model_flags.add_to(app, train::kPlan, model_args);
  for (const char* f : {"--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length"})
    app.get_option(f)->required()->default_str("");
  app.get_option("--vocab-size")->capture_default_str();
  app.add_option("--micro-batch-size", o.micro_batch, "fix it (default: search 1, 2, 4, ...)");
  app.add_option("--global-batch-size", o.global_batch)->capture_default_str();
  app.add_flag("--bf16", bf16, "bf16 params, fp32 grads and optimizer (the default)");
  app.add_flag("--fp16", fp16, "fp16 params, fp32 grads and optimizer");
  app.add_flag("--fp32", fp32, "fp32 training");
  std::string gpu = "h100";
  std::string gpu_keys;
  for (const auto& g : plan::gpu_specs()) gpu_keys += (gpu_keys.empty() ? "" : ", ") + std::string(g.key);
  app.add_option("--gpu", gpu,
                 "the GPU of the planned job (" + gpu_keys + "): its datasheet memory and dense bf16 TFLOP/s "
                 "unless --gpu-memory-gb / --gpu-peak-tflops say otherwise, and op times measured on another GPU "
                 "(the shipped H200 table) scaled to it by FLOP rate and memory bandwidth")
      ->capture_default_str();
  app.add_option("--nnodes", mc.nnodes)->capture_default_str();
  app.add_option("--gpus-per-node", mc.gpus_per_node)->capture_default_str();
  app.add_option("--gpu-memory-gb", mc.gpu_memory_gb, "GiB per GPU")->capture_default_str();
  app.add_option("--gpu-peak-tflops", mc.peak_tflops, "dense 16-bit TFLOP/s per GPU")->capture_default_str();
  app.add_option("--assumed-mfu", mc.assumed_mfu, "fraction of peak the matmuls reach")->capture_default_str();
  app.add_option("--intra-node-bandwidth-gbs", mc.intra_node_bw_gbs, "NVLink bus bandwidth, GB/s")
      ->capture_default_str();
  app.add_option("--inter-node-bandwidth-gbs", mc.inter_node_bw_gbs, "per-GPU bus bandwidth across nodes, GB/s")
      ->capture_default_str();
  app.add_option("--tensor-model-parallel-size", o.tp, "fix TP (default: search)");
  app.add_option("--pipeline-model-parallel-size", o.pp, "fix PP (default: search)");
  app.add_option("--context-parallel-size", o.cp,
                 "fix CP (default: 1, and CP 2, 4, ... searched when no layout fits without it)");
  app.add_option("--cp-comm-type", cp_comm_type,
                 "CP's attention exchange: p2p (K/V ring, overlapped), all_gather or a2a (head all-to-all)")
      ->capture_default_str();
  app.add_option("--num-layers-per-virtual-pipeline-stage", layers_per_virtual_stage, "fix vpp (needs a fixed PP)");
  app.add_option("--virtual-pipeline-search", vpp_list, "vpp values to try when PP > 1")->capture_default_str();
  app.add_flag("--sequence-parallel", sp_flag, "force SP on (default: on whenever TP > 1)");
  app.add_flag("--no-sequence-parallel", no_sp, "never use SP");
  app.add_flag("--use-distributed-optimizer", dopt,
               "force the distributed optimizer, optim (default: try no_shard, optim, optim_grads and "
               "optim_grads_params at DP > 1)");
  app.add_flag("--no-distributed-optimizer", no_dopt, "never shard (no_shard)");
  bool overlap_param_gather = false;
  app.add_flag("--overlap-param-gather", overlap_param_gather,
               "with --data-parallel-sharding-strategy optim_grads_params: the next layer's all-gather prefetched "
               "during this one (two layers' parameters held)");
  app.add_flag("--recompute-activations", recompute_activations, "force selective recompute");
  app.add_option("--recompute-granularity", granularity, "force: none, selective or full");
  app.add_option("--recompute-search", recompute_search, "granularities to try")->capture_default_str();
  app.add_flag("--allow-tp-across-nodes", o.allow_tp_across_nodes, "also list TP groups that span nodes");
  std::string memory_model = "tripod";
  app.add_option("--memory-model", memory_model,
                 "tripod: what tripod allocates (flash-style activations); megatron: Korthikanti et al.'s "
                 "activations (attention scores stored), for planning a Megatron-LM run")
      ->capture_default_str();
  app.add_option("--workspace-gb", o.memory.workspace_fixed_gib,
                 "fixed GiB per GPU outside the model's buffers (default: tripod 1, the CUDA context; megatron 2)");
  std::string op_times = "auto", device;
  bool calibrate = false;
  app.add_option("--op-times", op_times,
                 "per-op times for the compute term: auto (this machine's --calibrate cache, else the shipped H200 "
                 "table), h200, assumed (FLOPs / (peak x --assumed-mfu)) or the path of an op-time file")
      ->capture_default_str();
  app.add_flag("--calibrate", calibrate,
               "time the ops of the layouts that fit on this machine's device with tripod's kernels (seconds; "
               "cached per device and tripod version)");
  app.add_option("--device", device,
                 "the device the planned run uses, and --calibrate measures on: cuda (default) or cpu (no CUDA "
                 "context or library workspaces in the memory model)");
  std::vector<std::string> links;
  app.add_option("--links", links,
                 "files of `tripod bench comm --links-out FILE` run under the target job's launcher: measured bus "
                 "bandwidths replace --intra-node-bandwidth-gbs / --inter-node-bandwidth-gbs");
  app.add_option("--top", top, "rows to show")->capture_default_str();
  app.add_flag("--json", json, "print JSON instead of the table");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  train::apply_model_flags(model_args.model_flags, model_args.model);
  train::apply_fp8_flags(model_args.precision, model_args.model);  // --fp8-format: FP8 weights, transposes, GEMM rate
  m = model_args.model;
  m.finalize();
  TRIPOD_CHECK_HINT(int(bf16) + int(fp16) + int(fp32) <= 1, "pass one of --bf16, --fp16, --fp32",
                    "more than one precision flag given");
  o.dtype = fp16 ? DType::F16 : fp32 ? DType::F32 : DType::BF16;
  o.sequence_parallel = no_sp ? plan::Choice::kOff : plan::Choice::kOn;
  TRIPOD_CHECK(!(sp_flag && no_sp), "--sequence-parallel and --no-sequence-parallel both given");
  TRIPOD_CHECK(!(dopt && no_dopt), "--use-distributed-optimizer and --no-distributed-optimizer both given");
  o.distributed_optimizer = dopt ? plan::Choice::kOn : no_dopt ? plan::Choice::kOff : plan::Choice::kSearch;
  {  // --data-parallel-sharding-strategy / --use-megatron-fsdp: every dp > 1 layout with that strategy
    const auto s = distributed::resolve_sharding_strategy(model_args.parallel.data_parallel_sharding_strategy,
                                                          model_args.parallel.use_megatron_fsdp, dopt);
    using S = distributed::ShardingStrategy;
    if (s == S::Optim) o.distributed_optimizer = plan::Choice::kOn;
    if (s == S::NoShard && !model_args.parallel.data_parallel_sharding_strategy.empty())
      o.distributed_optimizer = plan::Choice::kOff;
    if (s >= S::OptimGrads) {
      TRIPOD_CHECK_HINT(!no_dopt, "drop --no-distributed-optimizer", "--data-parallel-sharding-strategy {} shards the "
                        "optimizer state, which contradicts --no-distributed-optimizer",
                        distributed::sharding_strategy_name(s));
      o.distributed_optimizer = plan::Choice::kOn;
      o.zero_stage = s == S::OptimGrads ? 2 : 3;
    }
    o.dist_opt_instances = std::max(1, model_args.parallel.ddp.num_distributed_optimizer_instances);
    o.overlap_param_gather = overlap_param_gather;
    // --expert-model-parallel-size given: pinned; else searched for MoE models.
    if (app.get_option("--expert-model-parallel-size")->count() > 0) o.ep = model_args.parallel.ep;
  }
  const std::optional<config::CpCommType> cp_comm = config::cp_comm_type_from_name(cp_comm_type);
  TRIPOD_CHECK_HINT(cp_comm.has_value(), "use p2p, all_gather or a2a", "tripod plan: unknown --cp-comm-type '{}'",
                    cp_comm_type);
  o.cp_comm = *cp_comm;
  if (recompute_activations) granularity = granularity.empty() ? "selective" : granularity;
  o.recompute = granularity.empty() ? parse_recompute_list(recompute_search)
                                    : std::vector<plan::Recompute>{plan::recompute_from_string(granularity)};
  o.vpp.clear();
  if (layers_per_virtual_stage > 0) {
    TRIPOD_CHECK_HINT(o.pp > 0, "also pass --pipeline-model-parallel-size",
                      "--num-layers-per-virtual-pipeline-stage needs a fixed pipeline size");
    const int64_t per_rank = m.num_layers / o.pp;
    TRIPOD_CHECK(per_rank % layers_per_virtual_stage == 0,
                 "--num-layers-per-virtual-pipeline-stage {} does not divide the {} layers per pipeline rank",
                 layers_per_virtual_stage, per_rank);
    o.vpp = {int(per_rank / layers_per_virtual_stage)};
  } else {
    std::stringstream ss(vpp_list);
    std::string item;
    while (std::getline(ss, item, ',')) o.vpp.push_back(std::stoi(item));
  }
  const std::optional<plan::GpuSpec> spec = plan::find_gpu_spec(gpu);
  TRIPOD_CHECK_HINT(spec.has_value(), "pass one of " + gpu_keys + ", or leave --gpu out and give "
                    "--gpu-memory-gb and --gpu-peak-tflops", "--gpu {}: no datasheet figures for it", gpu);
  if (app.get_option("--gpu-memory-gb")->count() == 0) mc.gpu_memory_gb = spec->memory_gib;
  if (app.get_option("--gpu-peak-tflops")->count() == 0) mc.peak_tflops = spec->bf16_tflops;
  TRIPOD_CHECK(mc.gpu_memory_gb > 0 && mc.peak_tflops > 0 && mc.assumed_mfu > 0 && mc.assumed_mfu <= 1,
               "--gpu-memory-gb, --gpu-peak-tflops must be > 0 and --assumed-mfu in (0, 1]");
  const std::string comm_note = plan::apply_link_files(links, mc.intra_node_bw_gbs, mc.inter_node_bw_gbs,
                                                       &mc.intra_node_a2a_gbs, &mc.inter_node_a2a_gbs);
  TRIPOD_CHECK(mc.intra_node_bw_gbs > 0 && mc.inter_node_bw_gbs > 0, "link bandwidths must be > 0");

  o.memory.model = plan::memory_model_from_string(memory_model);
  TRIPOD_CHECK_HINT(device.empty() || device == "cuda" || device == "cpu", "pass --device cuda or --device cpu",
                    "--device {}: unknown device", device);
  if (device == "cpu") {
    o.memory.cuda = false;
    if (o.memory.workspace_fixed_gib < 0) o.memory.workspace_fixed_gib = 0;
  }
  // Without --device the plan is for GPUs, even from a machine without one:
  // a missing CPU calibration is no news then.
  const std::string op_device = device.empty() ? default_device().device : device;
  plan::OpTimesChoice op_choice =
      plan::resolve_op_times(op_times, calibrate, op_device,
                             [](const std::string& dev) { return make_backend(dev); },
                             [&](const plan::OpProfile* p) { return plan::ops_of_fitting_layouts(m, mc, o, p); },
                             /*explain_missing_cache=*/!(device.empty() && op_device == "cpu"));
  // Op times of another GPU (the shipped H200 table, a file from elsewhere)
  // are scaled to the planned one by its datasheet figures.
  if (op_choice.profile && device != "cpu")
    if (auto from = plan::find_gpu_spec(op_choice.profile->device); from && std::string(from->key) != spec->key) {
      const std::string measured = op_choice.profile->origin;
      op_choice.profile = plan::scale_op_profile(*op_choice.profile, *from, *spec);
      if (auto at = op_choice.note.find(measured); at != std::string::npos)
        op_choice.note.replace(at, measured.size(), op_choice.profile->origin);
    }
  mc.ops = op_choice.profile ? &*op_choice.profile : nullptr;
  plan::PlanResult r = plan::plan_layouts(m, mc, o);
  r.notes.insert(r.notes.begin(), op_choice.note);
  if (mc.world() > 1 || !links.empty()) r.notes.insert(r.notes.begin() + 1, comm_note);
  if (json) {
    nlohmann::json j;
    j["model"] = {{"num_layers", m.num_layers}, {"hidden_size", m.hidden_size},
                  {"num_attention_heads", m.num_attention_heads}, {"ffn_hidden_size", m.ffn_hidden_size},
                  {"seq_length", m.seq_length}, {"vocab_size", m.vocab_size},
                  {"num_parameters", m.num_parameters(m.padded_vocab_size(1))}};
    j["machine"] = {{"gpu", spec->name}, {"nnodes", mc.nnodes}, {"gpus_per_node", mc.gpus_per_node}, {"gpu_memory_gb", mc.gpu_memory_gb},
                    {"peak_tflops", mc.peak_tflops}, {"assumed_mfu", mc.assumed_mfu},
                    {"intra_node_bandwidth_gbs", mc.intra_node_bw_gbs},
                    {"inter_node_bandwidth_gbs", mc.inter_node_bw_gbs}};
    j["memory_model"] = plan::to_string(o.memory.model);
    j["op_times"] = mc.ops ? mc.ops->origin : std::string("assumed");
    j["valid_layouts"] = r.valid_layouts;
    j["too_big"] = r.too_big;
    j["plain_dp_fits"] = r.plain_dp_fits;
    j["notes"] = r.notes;
    j["layouts"] = nlohmann::json::array();
    for (int i = 0; i < std::min<int>(top, int(r.fits.size())); ++i) {
      nlohmann::json c = to_json(r.fits[i]);
      c["megatron_flags"] = plan::megatron_flags(m, r.fits[i].layout);
      if (mc.ops) {
        const auto ops = plan::micro_batch_ops(m, r.fits[i].layout);
        c["op_times"] = {{"measured", mc.ops->measured_count(ops)}, {"ops", ops.size()}};
      }
      j["layouts"].push_back(c);
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    print_table(m, mc, r, top, o.memory.model);
  }
  return r.fits.empty() ? 1 : 0;
}

}  // namespace
}  // namespace tripod::cli

TRIPOD_REGISTER_COMMAND(plan, "plan", "choose a TP x PP x DP layout: what fits, best first, predicted memory and time",
                        tripod::cli::run_plan);
