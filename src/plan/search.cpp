// Layout search. See plan/search.h for the rules and the order.
#include "plan/search.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "base/error.h"

namespace tripod::plan {
namespace {

constexpr double kGiB = double(1ll << 30);

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

bool is_plain_dp(const Layout& l) { return l.tp == 1 && l.pp == 1 && l.cp == 1; }

void add_reasons(const GptConfig& m, const Machine& mc, Candidate& c) {
  const Layout& l = c.layout;
  auto& r = c.reasons;
  const double gpu = mc.gpu_memory_gb * kGiB;
  if (is_plain_dp(l)) r.push_back("fits without model parallelism: plain DP (no TP all-reduces, no bubble)");
  if (l.tp > 1)
    r.push_back(c.time.tp_crosses_nodes
                    ? fmt::format("TP{} spans nodes: 4 all-reduces per layer over the {:.0f} GB/s inter-node link",
                                  l.tp, mc.inter_node_bw_gbs)
                    : fmt::format("TP{} kept inside a node (NVLink, {:.0f} GB/s)", l.tp, mc.intra_node_bw_gbs));
  if (l.pp > 1)
    r.push_back(fmt::format("PP{}{}: bubble (P-1)/(v m) = {}/({}x{}) = {:.1f}% of compute", l.pp,
                            l.vpp > 1 ? fmt::format(" interleaved x{}", l.vpp) : "", l.pp - 1, l.vpp,
                            l.num_microbatches(),
                            100.0 * (l.pp - 1) / (double(l.vpp) * double(l.num_microbatches()))));
  if (l.sp()) r.push_back(fmt::format("sequence parallel: LayerNorm/dropout activations / {}", l.tp));
  if (l.cp > 1)
    r.push_back(fmt::format("CP{}: every sequence split {} ways (activations / {}); {} {} ({:.1f} ms exposed)",
                            l.cp, l.cp, l.cp,
                            l.cp_comm == config::CpCommType::A2a         ? "head all-to-all"
                            : l.cp_comm == config::CpCommType::AllGather ? "K/V all-gather"
                                                                         : "K/V ring",
                            c.time.cp_crosses_nodes ? "crosses nodes" : "inside a node", 1e3 * c.time.cp_comm));
  if (l.zero_stage >= 2)
    r.push_back(fmt::format("ZeRO-{} (--data-parallel-sharding-strategy {}): {:.2f} instead of {:.0f} bytes/param, "
                            "+{:.2f} GiB of layers in use{}",
                            l.zero_stage, l.zero_stage == 3 ? "optim_grads_params" : "optim_grads",
                            c.mem.bytes_per_param, model_state_bytes_per_param(l.dtype, false, l.dp),
                            sharded_working_bytes(m, l, c.mem.stage) / kGiB,
                            l.zero_stage == 3 ? fmt::format("; params all-gathered twice per micro-batch, {:.1f} ms a step",
                                                            1e3 * c.time.dp_param_gather)
                                              : std::string()));
  else if (l.distributed_optimizer)
    r.push_back(fmt::format("distributed optimizer: {:.2f} instead of {:.0f} bytes/param", c.mem.bytes_per_param,
                            model_state_bytes_per_param(l.dtype, false, l.dp)));
  if (l.dist_opt_instances > 1 && (l.zero_stage >= 2 || l.distributed_optimizer))
    r.push_back(fmt::format("hybrid sharding: {} distributed-optimizer instances of {} ranks (shards / {}, not / {}); "
                            "the gradient shards all-reduced across instances once a step",
                            l.dist_opt_instances, l.shard_ranks(), l.shard_ranks(), l.dp * l.cp));
  if (l.ep > 1)
    r.push_back(fmt::format("EP{}: {} of {} experts per rank; token all-to-alls {:.1f} ms a step{}", l.ep,
                            m.moe.num_experts / l.ep, m.moe.num_experts, 1e3 * c.time.ep_comm,
                            c.time.ep_crosses_nodes ? " (across nodes)" : ""));
  if (l.recompute == Recompute::Selective) r.push_back("selective recompute: attention scores not stored (+ ~2LTC FLOPs)");
  if (l.recompute == Recompute::Full) r.push_back("full recompute: only layer inputs stored (+33% compute)");
  if (l.dp > 1 && c.time.dp_crosses_nodes) r.push_back("DP gradient sync crosses nodes");
  r.push_back(fmt::format("grad accumulation {} = {} / ({} x {})", l.num_microbatches(), l.global_batch,
                          l.micro_batch, l.dp));
  r.push_back(fmt::format("{:.1f} of {:.0f} GiB ({:.0f}%)", c.mem.total() / kGiB, mc.gpu_memory_gb,
                          100.0 * c.mem.total() / gpu));
}

// How a layout shards its state over dp, for the notes.
std::string sharding_words(const Layout& l) {
  if (l.zero_stage == 3) return "ZeRO-3 (--data-parallel-sharding-strategy optim_grads_params) sharding everything";
  if (l.zero_stage == 2) return "ZeRO-2 (--data-parallel-sharding-strategy optim_grads) sharding gradients and optimizer state";
  return "the distributed optimizer sharding the optimizer state";
}

// The plan's header when some plain-DP layout fits: what row 1 is, in the
// ranking's own terms. "Fits one GPU" only when the replicated model state
// fits (not only with the distributed optimizer sharding it over DP).
std::string ranking_note(const std::vector<Candidate>& fits) {
  const Candidate& first = fits.front();
  auto plain = [](bool shard) {
    return [shard](const Candidate& c) { return is_plain_dp(c.layout) && c.layout.distributed_optimizer == shard; };
  };
  const bool replicated_fits = std::any_of(fits.begin(), fits.end(), plain(false));
  if (is_plain_dp(first.layout)) {
    if (replicated_fits) return "the model fits one GPU: plain DP is predicted fastest (row 1)";
    return fmt::format("plain DP is predicted fastest (row 1) but fits only with {} over its {} data-parallel "
                       "GPUs; the replicated model state does not fit one GPU",
                       sharding_words(first.layout), first.layout.dp);
  }
  const auto it = std::find_if(fits.begin(), fits.end(), [](const Candidate& c) { return is_plain_dp(c.layout); });
  return fmt::format("plain DP fits too{} (row {}, {}: {:.3f} s per step), but {} is predicted faster ({:.3f} s, "
                     "row 1)",
                     it->layout.distributed_optimizer ? " with " + sharding_words(it->layout) : "",
                     it - fits.begin() + 1, it->layout.str(), it->time.total(), first.layout.str(),
                     first.time.total());
}

// Every layout of the search space (before the rules).
std::vector<Layout> enumerate(const GptConfig& m, const Machine& mc, const SearchOptions& o) {
  std::vector<Layout> out;
  const int world = mc.world();
  const int cp = std::max(1, o.cp);
  const std::vector<int> tps = o.tp > 0 ? std::vector<int>{o.tp} : divisors(std::max(1, world / cp));
  for (int tp : tps) {
    const std::vector<int> pps = o.pp > 0 ? std::vector<int>{o.pp} : divisors(std::max(1, world / (tp * cp)));
    for (int pp : pps) {
      if (world % (tp * pp * cp) != 0) continue;
      const int dp = world / (tp * pp * cp);
      std::vector<int64_t> mbs;
      if (o.micro_batch > 0) mbs = {o.micro_batch};
      else
        for (int64_t b = 1; b <= o.global_batch / dp; b *= 2) mbs.push_back(b);
      std::vector<bool> sps = {false};
      if (tp > 1 && o.sequence_parallel == Choice::kOn) sps = {true};
      if (tp > 1 && o.sequence_parallel == Choice::kSearch) sps = {false, true};
      // The sharding strategies tried (0 no_shard, 1 optim, 2 optim_grads,
      // 3 optim_grads_params): the one given, else at dp > 1 all four.
      std::vector<int> stages = {o.distributed_optimizer == Choice::kOn ? 1 : 0};
      if (dp > 1 && o.zero_stage >= 2) stages = {o.zero_stage};
      else if (dp > 1 && o.distributed_optimizer == Choice::kSearch) stages = {0, 1, 2, 3};
      std::vector<int> vpps = pp > 1 ? o.vpp : std::vector<int>{1};
      std::vector<int> eps = {1};
      if (o.ep > 0) eps = {o.ep};
      else if (m.moe.num_experts > 0 && tp == 1)
        for (int e : divisors(dp))
          if (e > 1 && m.moe.num_experts % e == 0) eps.push_back(e);
      for (int ep : eps)
      for (int vpp : vpps)
        for (int64_t mb : mbs)
          for (bool sp : sps)
            for (int stage : stages)
              for (Recompute rc : o.recompute) {
                const bool dopt = stage >= 1;
                Layout l{config::Layout::make(world, tp, pp, 1, cp)};
                l.vpp = vpp, l.micro_batch = mb, l.dtype = o.dtype;
                l.global_batch = o.global_batch, l.sequence_parallel = sp;
                l.distributed_optimizer = dopt, l.recompute = rc, l.cp_comm = o.cp_comm;
                l.ep = ep;
                if (stage >= 2) {  // the strategy implies the distributed optimizer
                  l.zero_stage = stage;
                  l.overlap_param_gather = o.overlap_param_gather && stage == 3;
                }
                if (o.dist_opt_instances > 1 && dopt) {
                  if ((dp * cp) % o.dist_opt_instances != 0) continue;
                  l.dist_opt_instances = o.dist_opt_instances;
                }
                out.push_back(l);
              }
    }
  }
  return out;
}

}  // namespace

std::string layout_rule_violation(const GptConfig& m, const Machine& mc, const Layout& l, bool allow_tp_across_nodes) {
  const int world = mc.world();
  if (l.tp < 1 || l.pp < 1 || l.dp < 1 || l.vpp < 1 || l.micro_batch < 1)
    return "sizes must be >= 1";
  if (l.world_size != world || int64_t(l.tp) * l.pp * l.dp * l.cp != world)
    return l.cp > 1 ? fmt::format("TP x CP x PP x DP = {} x {} x {} x {} != {} GPUs", l.tp, l.cp, l.pp, l.dp, world)
                    : fmt::format("TP x PP x DP = {} x {} x {} != {} GPUs", l.tp, l.pp, l.dp, world);
  if (l.cp > 1 && m.seq_length % (2 * l.cp) != 0)
    return fmt::format("context parallel: seq {} % (2 x CP {}) != 0", m.seq_length, l.cp);
  if (l.cp > 1 && l.cp_comm == config::CpCommType::A2a &&
      ((m.num_attention_heads / l.tp) % l.cp != 0 || (m.query_groups() / l.tp) % l.cp != 0))
    return fmt::format("--cp-comm-type a2a: heads {} and K/V groups {} per TP rank not both divisible by CP {}",
                       m.num_attention_heads / l.tp, m.query_groups() / l.tp, l.cp);
  if (l.cp > 1 && m.fp8.enabled() && m.fp8.dot_product_attention)
    return "--fp8-dot-product-attention: not with context parallelism yet";
  if (l.cp > 1 && l.sp() && (m.seq_length / l.cp) % l.tp != 0)
    return fmt::format("sequence parallel: seq {} / CP {} % TP {} != 0", m.seq_length, l.cp, l.tp);
  if (!allow_tp_across_nodes && group_crosses_nodes(l.tp, mc.gpus_per_node))
    return fmt::format("TP {} does not divide the {} GPUs of a node (TP would cross nodes; TP is kept within a "
                       "node unless --allow-tp-across-nodes)", l.tp, mc.gpus_per_node);
  if (m.num_attention_heads % l.tp != 0)
    return fmt::format("heads {} % TP {} != 0", m.num_attention_heads, l.tp);
  if (m.query_groups() % l.tp != 0) return fmt::format("query groups {} % TP {} != 0", m.query_groups(), l.tp);
  if (m.ffn_hidden_size % l.tp != 0) return fmt::format("ffn {} % TP {} != 0", m.ffn_hidden_size, l.tp);
  if (l.sp() && m.seq_length % l.tp != 0)
    return fmt::format("sequence parallel: seq {} % TP {} != 0", m.seq_length, l.tp);
  if (m.num_layers % (int64_t(l.pp) * l.vpp) != 0)
    return fmt::format("layers {} % (PP {} x vpp {}) != 0", m.num_layers, l.pp, l.vpp);
  if (l.global_batch % (l.micro_batch * l.dp) != 0)
    return fmt::format("global batch {} % (micro {} x DP {}) != 0", l.global_batch, l.micro_batch, l.dp);
  if (l.vpp > 1 && l.pp < 2) return "virtual pipeline needs PP >= 2";
  if (l.ep > 1 && m.moe.num_experts % l.ep != 0)
    return fmt::format("experts {} % EP {} != 0", m.moe.num_experts, l.ep);
  if (l.ep > 1 && l.dp % l.ep != 0) return fmt::format("EP {} does not divide DP {}", l.ep, l.dp);
  if (l.ep > 1 && l.tp > 1) return "expert parallelism needs TP 1 in this version";
  if (l.vpp > 1 && l.num_microbatches() % l.pp != 0)
    return fmt::format("interleaved schedule: micro-batches {} % PP {} != 0", l.num_microbatches(), l.pp);
  return "";
}

Candidate evaluate(const GptConfig& m, const Machine& mc, const Layout& l, const MemoryOptions& o) {
  Candidate c;
  c.layout = l;
  c.mem = estimate_memory(m, l, o);
  c.time = estimate_time(m, l, mc);
  const double tokens = double(l.global_batch) * double(m.seq_length);
  c.tokens_per_second = tokens / c.time.total();
  c.mfu = m.flops_per_token() * tokens / (c.time.total() * mc.peak_tflops * 1e12 * mc.world());
  c.fits = c.mem.total() <= mc.gpu_memory_gb * kGiB;
  add_reasons(m, mc, c);
  return c;
}

PlanResult plan_layouts(const GptConfig& m, const Machine& mc, const SearchOptions& o) {
  check_finalized(m);
  TRIPOD_CHECK(mc.nnodes >= 1 && mc.gpus_per_node >= 1, "--nnodes and --gpus-per-node must be >= 1");
  TRIPOD_CHECK(o.global_batch >= 1, "--global-batch-size must be >= 1");
  PlanResult res;
  std::vector<std::pair<std::string, int64_t>> violations;  // distinct reasons, first seen first
  for (const Layout& l : enumerate(m, mc, o)) {
    if (std::string why = layout_rule_violation(m, mc, l, o.allow_tp_across_nodes); !why.empty()) {
      auto it = std::find_if(violations.begin(), violations.end(), [&](const auto& v) { return v.first == why; });
      if (it == violations.end()) violations.emplace_back(std::move(why), 1);
      else ++it->second;
      continue;
    }
    ++res.valid_layouts;
    Candidate c = evaluate(m, mc, l, o.memory);
    if (!res.smallest || c.mem.total() < res.smallest->mem.total()) res.smallest = c;
    if (!c.fits) {
      ++res.too_big;
      continue;
    }
    res.plain_dp_fits |= is_plain_dp(l);
    res.fits.push_back(std::move(c));
  }
  // Nothing fits at CP 1 and CP was left to the search: long sequences split
  // across a context-parallel group, the smallest CP that fits first.
  if (res.fits.empty() && o.cp == 0 && mc.world() > 1) {
    for (int cp = 2; cp <= mc.world() && res.fits.empty(); cp *= 2) {
      if (mc.world() % cp != 0) break;
      SearchOptions q = o;
      q.cp = cp;
      PlanResult r = plan_layouts(m, mc, q);
      if (r.fits.empty()) continue;
      r.notes.insert(r.notes.begin(), fmt::format(
          "no layout fits without context parallelism; CP {} splits every sequence of {} tokens {} ways "
          "(tripod runs --context-parallel-size on the CPU backend only in this version)", cp, m.seq_length, cp));
      return r;
    }
    if (res.smallest) res.notes.push_back(fmt::format("context parallelism (CP 2 .. {}) does not make it fit either", mc.world()));
  }
  // Best first by predicted step time; times within 1% of each other are
  // estimates of the same thing: among them plain DP first (no TP
  // all-reduces, no bubble), then fewer moving parts (no interleaving, less
  // recompute), then more memory headroom. Buckets keep the order transitive.
  auto bucket = [](const Candidate& c) { return int64_t(std::floor(std::log(c.time.total()) / std::log(1.01))); };
  auto complexity = [](const Layout& l) { return int(l.vpp > 1) + int(l.recompute) + std::max(0, l.zero_stage - 1); };
  std::stable_sort(res.fits.begin(), res.fits.end(), [&](const Candidate& a, const Candidate& b) {
    if (bucket(a) != bucket(b)) return bucket(a) < bucket(b);
    if (is_plain_dp(a.layout) != is_plain_dp(b.layout)) return is_plain_dp(a.layout);
    if (complexity(a.layout) != complexity(b.layout)) return complexity(a.layout) < complexity(b.layout);
    return a.mem.total() < b.mem.total();
  });
  // With TP or PP pinned above 1 no plain-DP layout was searched: whether
  // one fits is asked separately, so the note never claims what was not tried.
  std::optional<Candidate> plain_dp;
  if (o.tp > 1 || o.pp > 1) {
    SearchOptions q = o;
    q.tp = 1, q.pp = 1;
    for (const Layout& l : enumerate(m, mc, q)) {
      if (!layout_rule_violation(m, mc, l, o.allow_tp_across_nodes).empty()) continue;
      Candidate c = evaluate(m, mc, l, o.memory);
      if (c.fits && (!plain_dp || c.time.total() < plain_dp->time.total())) plain_dp = std::move(c);  // fastest
    }
  }
  const std::string pinned =
      o.tp > 1 && o.pp > 1 ? fmt::format("TP {} and PP {}", o.tp, o.pp)
                           : (o.tp > 1 ? fmt::format("TP {}", o.tp) : fmt::format("PP {}", o.pp));
  if (res.plain_dp_fits) res.notes.push_back(ranking_note(res.fits));
  else if (plain_dp)
    res.notes.push_back(fmt::format(
        "the model also fits one GPU with plain DP ({}: {:.1f} of {:.0f} GiB); {} pinned by the flags, so only "
        "layouts with it are searched (leave the size unset to compare)",
        plain_dp->layout.str(), plain_dp->mem.total() / kGiB, mc.gpu_memory_gb, pinned));
  else if (!res.fits.empty() && (o.tp > 1 || o.pp > 1))
    res.notes.push_back(fmt::format("{} pinned; the model does not fit one GPU with plain DP either", pinned));
  else if (!res.fits.empty())
    res.notes.push_back("the model does not fit one GPU with plain DP: model parallelism (TP/PP) needed");
  if (res.fits.empty() && res.smallest)
    res.notes.push_back(fmt::format(
        "no layout fits {:.0f} GiB; the smallest ({}) needs {:.1f} GiB: add GPUs, lower --seq-length, or use "
        "GPUs with more memory",
        mc.gpu_memory_gb, res.smallest->layout.str(), res.smallest->mem.total() / kGiB));
  if (res.valid_layouts == 0) {
    // Name the rules that the searched layouts broke, most often broken first.
    std::stable_sort(violations.begin(), violations.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    std::string why;
    for (size_t i = 0; i < violations.size() && i < 3; ++i) why += (i ? "; " : "") + violations[i].first;
    if (violations.size() > 3) why += fmt::format("; and {} other reasons", violations.size() - 3);
    res.notes.push_back(fmt::format(
        "no layout obeys the rules (TP within a node, heads % TP, query groups % TP, ffn % TP, layers % (PP x vpp), global % (micro x DP)): {}",
        why.empty() ? "nothing was searched" : why));
  }
  return res;
}

std::string megatron_flags(const GptConfig& m, const Layout& l) {
  std::string s = fmt::format("--tensor-model-parallel-size {} --pipeline-model-parallel-size {}", l.tp, l.pp);
  if (l.cp > 1) s += fmt::format(" --context-parallel-size {}", l.cp);
  if (l.ep > 1) s += fmt::format(" --expert-model-parallel-size {}", l.ep);
  if (l.cp > 1 && l.cp_comm != config::CpCommType::P2p) s += " --cp-comm-type " + config::to_string(l.cp_comm);
  if (l.vpp > 1) s += fmt::format(" --num-layers-per-virtual-pipeline-stage {}", m.num_layers / (l.pp * l.vpp));
  s += fmt::format(" --micro-batch-size {} --global-batch-size {}", l.micro_batch, l.global_batch);
  if (l.sp()) s += " --sequence-parallel";
  if (l.zero_stage >= 2)
    s += l.zero_stage == 3 ? " --data-parallel-sharding-strategy optim_grads_params"
                           : " --data-parallel-sharding-strategy optim_grads";
  if (l.distributed_optimizer) s += " --use-distributed-optimizer";  // Megatron-FSDP v1 needs it too
  if (l.zero_stage == 3 && l.overlap_param_gather) s += " --overlap-grad-reduce --overlap-param-gather";
  if (l.dist_opt_instances > 1 && (l.zero_stage >= 2 || l.distributed_optimizer))
    s += fmt::format(" --num-distributed-optimizer-instances {}", l.dist_opt_instances);
  if (l.recompute != Recompute::None) s += " --recompute-granularity " + to_string(l.recompute);
  return s;
}

}  // namespace tripod::plan
