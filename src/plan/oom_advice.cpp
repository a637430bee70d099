// Implementation of plan/oom_advice.h on top of plan/search.h.
#include "plan/oom_advice.h"

#include <fmt/format.h>

#include <algorithm>

namespace tripod::plan {
namespace {

double gib(double bytes) { return bytes / double(1ull << 30); }

// The job's GPUs as plan sees them: nodes of local_world_size GPUs.
Machine job_machine(const Job& job, double capacity_bytes) {
  Machine mc;
  mc.gpus_per_node = std::max(1, job.local_world_size);
  mc.nnodes = std::max(1, job.layout.world_size / mc.gpus_per_node);
  mc.gpu_memory_gb = gib(capacity_bytes);
  return mc;
}

// A CPU "device" (TRIPOD_CPU_MEMORY_LIMIT_MB) has no CUDA context or library
// workspaces to reserve (`tripod plan --device cpu`).
MemoryOptions memory_options(const Job& job) {
  MemoryOptions mo;
  if (job.cpu_device) mo.workspace_fixed_gib = 0, mo.cuda = false;
  return mo;
}

const char* precision_flag(DType d) { return d == DType::BF16 ? "bf16" : d == DType::F16 ? "fp16" : "fp32"; }

// The layouts predicted to fit (best first) or, when none does, the smallest
// and what it needs; then the `tripod plan` command that shows more.
std::string fitting_layouts(const Job& job, double capacity_bytes) {
  const GptConfig& m = job.model;
  const Machine mc = job_machine(job, capacity_bytes);
  SearchOptions o;
  o.global_batch = job.layout.global_batch;
  o.dtype = job.layout.dtype;
  o.memory = memory_options(job);
  o.cp_comm = job.layout.cp_comm;  // the run's --cp-comm-type for the CP layouts searched
  const std::string model =
      !job.model_flags.empty()
          ? job.model_flags
          : fmt::format("--num-layers {} --hidden-size {} --num-attention-heads {} --seq-length {} --vocab-size {}",
                        m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length, m.vocab_size);
  std::string cmd = fmt::format("tripod plan {} --global-batch-size {} --{} --nnodes {} --gpus-per-node {} "
                                "--gpu-memory-gb {:.1f}", model, o.global_batch, precision_flag(o.dtype), mc.nnodes,
                                mc.gpus_per_node, mc.gpu_memory_gb);
  if (job.cpu_device) cmd += " --device cpu";
  if (o.cp_comm != config::CpCommType::P2p) cmd += " --cp-comm-type " + config::to_string(o.cp_comm);
  PlanResult r;
  try {
    r = plan_layouts(m, mc, o);
  } catch (const Error& pe) {
    return fmt::format("(no layout suggestion: {})", pe.message());
  }
  std::string s;
  if (r.fits.empty()) {
    s += fmt::format("no layout of this model fits {} GPU(s) of {:.1f} GiB", mc.world(), mc.gpu_memory_gb);
    if (r.smallest)
      s += fmt::format("; the smallest ({}) needs {:.1f} GiB per GPU: add GPUs or shrink the model",
                       r.smallest->layout.str(), gib(r.smallest->mem.total()));
  } else {
    s += fmt::format("layouts predicted to fit {} GPU(s) of {:.1f} GiB (best first):", mc.world(), mc.gpu_memory_gb);
    for (size_t i = 0; i < r.fits.size() && i < 3; ++i)
      s += fmt::format("\n  {}. {} ({:.1f} GiB per GPU): {}", i + 1, r.fits[i].layout.str(),
                       gib(r.fits[i].mem.total()), megatron_flags(m, r.fits[i].layout));
  }
  return s + "\nmore: " + cmd;
}

const char* strategy_name(int stage) {
  return stage == 3 ? "optim_grads_params" : stage == 2 ? "optim_grads" : stage == 1 ? "optim" : "no_shard";
}

std::string amount(double bytes) {
  return bytes < double(1ull << 30) ? fmt::format("{:.1f} MiB", bytes / double(1ull << 20))
                                    : fmt::format("{:.1f} GiB", gib(bytes));
}

// The run's own layout with more data-parallel sharding (docs/zero.md):
// the weakest --data-parallel-sharding-strategy above the run's that is
// predicted to fit, or empty when there is none (or nothing to shard over).
std::string sharding_that_fits(const Job& job, double capacity_bytes) {
  const Layout& l = job.layout;
  if (l.dp < 1 || l.shard_ranks() <= 1) return "";
  const int now = l.zero_stage >= 2 ? l.zero_stage : l.distributed_optimizer ? 1 : 0;
  const Machine mc = job_machine(job, capacity_bytes);
  const double had = evaluate(job.model, mc, l, memory_options(job)).mem.total();
  for (int stage = now + 1; stage <= 3; ++stage) {
    Layout s = l;
    s.distributed_optimizer = true;
    s.zero_stage = stage >= 2 ? stage : 0;
    s.overlap_param_gather = false;
    const Candidate c = evaluate(job.model, mc, s, memory_options(job));
    if (c.mem.total() > capacity_bytes) continue;
    return fmt::format("this layout fits with --data-parallel-sharding-strategy {}: {} per GPU predicted, against "
                       "{} with {} (docs/zero.md)",
                       strategy_name(stage), amount(c.mem.total()), amount(had), strategy_name(now));
  }
  return "";
}

}  // namespace

std::string oom_advice(const OutOfMemoryError& e, const Job& job, const JobShape& where) {
  const Layout& l = job.layout;
  std::string s = fmt::format("rank {} (tp rank {}, pp rank {}, dp rank {}; layout tp {} pp {} dp {}{}) ran out of "
                              "memory: {} (needed {:.2f} GiB more, {:.2f} GiB already in use{})",
                              where.rank, where.tp_rank, where.pp_rank, where.dp_rank, l.tp, l.pp, l.dp,
                              l.cp > 1 ? fmt::format(" cp {}", l.cp) : std::string(), e.message(),
                              gib(double(e.requested)), gib(double(e.in_use)),
                              e.capacity ? fmt::format(", device memory {:.2f} GiB", gib(double(e.capacity))) : "");
  if (e.capacity == 0) return s;  // no capacity: nothing to plan against
  if (std::string z = sharding_that_fits(job, double(e.capacity)); !z.empty()) s += "\n" + z;
  return s + "\n" + fitting_layouts(job, double(e.capacity));
}

MemoryFit memory_fit_check(const Job& job, double capacity_bytes) {
  MemoryFit f;
  const Layout& l = job.layout;
  if (l.dp == 0) {
    f.finding = l.cp > 1 ? fmt::format("{} GPU(s) are not a multiple of TP {} x CP {} x PP {}", l.world_size, l.tp,
                                       l.cp, l.pp)
                         : fmt::format("{} GPU(s) are not a multiple of TP {} x PP {}", l.world_size, l.tp, l.pp);
    f.fix = std::string(l.cp > 1 ? "launch a multiple of TP x CP x PP ranks" : "launch a multiple of TP x PP ranks") +
            ", or change the sizes\n" + fitting_layouts(job, capacity_bytes);
    return f;
  }
  const Candidate c = evaluate(job.model, job_machine(job, capacity_bytes), l, memory_options(job));
  f.predicted_bytes = c.mem.total();
  f.fits = f.predicted_bytes <= capacity_bytes;
  f.finding = fmt::format("{}: predicted peak {:.1f} GiB per GPU (model states {:.1f}, activations {:.1f}, "
                          "workspace {:.1f}, reserved {:.1f}; busiest stage {}) of {:.1f} GiB",
                          l.str(), gib(f.predicted_bytes), gib(c.mem.model_states), gib(c.mem.activations),
                          gib(c.mem.workspace), gib(c.mem.reserved), c.mem.stage, gib(capacity_bytes));
  if (!f.fits) {
    f.fix = fitting_layouts(job, capacity_bytes);
    if (std::string z = sharding_that_fits(job, capacity_bytes); !z.empty()) f.fix = z + "\n" + f.fix;
  }
  return f;
}

}  // namespace tripod::plan
