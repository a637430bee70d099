// Implementation of cli/oom_advice.h on top of plan/search.h.
#include "cli/oom_advice.h"

#include <fmt/format.h>

#include "plan/search.h"
#include "train/trainer.h"

namespace tripod::cli {
namespace {

plan::ModelSpec model_spec(const train::TrainArgs& a) {
  plan::ModelSpec m;
  m.num_layers = a.model.num_layers;
  m.hidden_size = a.model.hidden_size;
  m.num_attention_heads = a.model.num_attention_heads;
  m.ffn_hidden_size = a.model.ffn_hidden_size;
  m.seq_length = a.model.seq_length;
  m.max_position_embeddings = a.model.max_position_embeddings;
  m.vocab_size = a.model.vocab_size;
  m.make_vocab_size_divisible_by = a.model.make_vocab_size_divisible_by;
  m.num_query_groups = a.model.group_query_attention ? a.model.num_query_groups : 0;
  m.swiglu = a.model.swiglu;
  m.untie_embeddings = a.model.untie_embeddings_and_output_weights;
  m.add_bias_linear = a.model.add_bias_linear;
  m.rmsnorm = a.model.rmsnorm();
  m.learned_positions = a.model.learned_positions();
  const auto& pr = a.precision;
  m.precision = pr.bf16 ? plan::Precision::kBf16 : pr.fp16 ? plan::Precision::kFp16 : plan::Precision::kFp32;
  return m;
}

double gib(double bytes) { return bytes / double(1ull << 30); }

// The job's GPUs as plan sees them: nodes of local_world_size GPUs.
plan::Machine job_machine(int world_size, int local_world_size, double capacity_bytes) {
  plan::Machine mc;
  mc.gpus_per_node = std::max(1, local_world_size);
  mc.nnodes = std::max(1, world_size / mc.gpus_per_node);
  mc.gpu_memory_gb = gib(capacity_bytes);
  return mc;
}

// A CPU "device" (TRIPOD_CPU_MEMORY_LIMIT_MB) has no CUDA context or library
// workspaces to reserve (`tripod plan --device cpu`).
plan::MemoryOptions memory_options(const train::TrainArgs& a) {
  plan::MemoryOptions mo;
  if (a.device == "cpu") mo.workspace_fixed_gib = 0, mo.cuda = false;
  return mo;
}

// The layouts predicted to fit (best first) or, when none does, the smallest
// and what it needs; then the `tripod plan` command that shows more.
std::string fitting_layouts(const train::TrainArgs& a, int world_size, int local_world_size, double capacity_bytes) {
  const plan::ModelSpec m = model_spec(a);
  const plan::Machine mc = job_machine(world_size, local_world_size, capacity_bytes);
  plan::SearchOptions o;
  const int dp = std::max(1, world_size / (a.parallel.tp * a.parallel.pp));
  o.global_batch = a.batch.global_batch_size > 0 ? a.batch.global_batch_size : a.batch.micro_batch_size * dp;
  o.memory = memory_options(a);
  std::string cmd = fmt::format("tripod plan --num-layers {} --hidden-size {} --num-attention-heads {} --seq-length {} "
                                "--vocab-size {} --global-batch-size {} --{} --nnodes {} --gpus-per-node {} "
                                "--gpu-memory-gb {:.1f}", m.num_layers, m.hidden_size, m.num_attention_heads,
                                m.seq_length, m.vocab_size, o.global_batch,
                                a.precision.bf16 ? "bf16" : a.precision.fp16 ? "fp16" : "fp32", mc.nnodes,
                                mc.gpus_per_node, mc.gpu_memory_gb);
  if (a.device == "cpu") cmd += " --device cpu";
  plan::PlanResult r;
  try {
    r = plan::plan_layouts(m, mc, o);
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
                       gib(r.fits[i].mem.total()), plan::megatron_flags(m, r.fits[i].layout));
  }
  return s + "\nmore: " + cmd;
}

}  // namespace

std::string oom_advice(const OutOfMemoryError& e, const train::TrainArgs& a, const JobShape& job) {
  std::string s = fmt::format("rank {} (tp rank {}, pp rank {}, dp rank {}; layout tp {} pp {} dp {}) ran out of "
                              "memory: {} (needed {:.2f} GiB more, {:.2f} GiB already in use{})",
                              job.rank, job.tp_rank, job.pp_rank, job.dp_rank, a.parallel.tp, a.parallel.pp,
                              job.world_size / (a.parallel.tp * a.parallel.pp), e.message(), gib(double(e.requested)),
                              gib(double(e.in_use)),
                              e.capacity ? fmt::format(", device memory {:.2f} GiB", gib(double(e.capacity))) : "");
  if (e.capacity == 0) return s;  // no capacity: nothing to plan against
  return s + "\n" + fitting_layouts(a, job.world_size, job.local_world_size, double(e.capacity));
}

MemoryFit memory_fit_check(const train::TrainArgs& a, int world_size, int local_world_size, double capacity_bytes) {
  MemoryFit f;
  plan::Layout l;
  l.tp = a.parallel.tp, l.pp = a.parallel.pp;
  if (world_size % (a.parallel.tp * a.parallel.pp) != 0) {
    f.finding =
        fmt::format("{} GPU(s) are not a multiple of TP {} x PP {}", world_size, a.parallel.tp, a.parallel.pp);
    f.fix = "launch a multiple of TP x PP ranks, or change the sizes\n" +
            fitting_layouts(a, world_size, local_world_size, capacity_bytes);
    return f;
  }
  l.dp = world_size / (a.parallel.tp * a.parallel.pp);
  l.vpp = std::max(1, train::virtual_pipeline_size(a));
  l.micro_batch = a.batch.micro_batch_size;
  l.global_batch = a.batch.global_batch_size > 0 ? a.batch.global_batch_size : a.batch.micro_batch_size * l.dp;
  l.sequence_parallel = a.parallel.sequence_parallel;
  l.distributed_optimizer = a.parallel.ddp.use_distributed_optimizer;
  const auto& p = a.parallel;
  const std::string g = p.recompute_granularity.empty() && p.recompute_activations ? "selective"
                                                                                   : p.recompute_granularity;
  l.recompute = g.empty() ? plan::Recompute::kNone : plan::recompute_from_string(g);
  const plan::Machine mc = job_machine(world_size, local_world_size, capacity_bytes);
  const plan::MemoryOptions mo = memory_options(a);
  const plan::Candidate c = plan::evaluate(model_spec(a), mc, l, mo);
  f.predicted_bytes = c.mem.total();
  f.fits = f.predicted_bytes <= capacity_bytes;
  f.finding = fmt::format("{}: predicted peak {:.1f} GiB per GPU (model states {:.1f}, activations {:.1f}, "
                          "workspace {:.1f}, reserved {:.1f}; busiest stage {}) of {:.1f} GiB",
                          l.str(), gib(f.predicted_bytes), gib(c.mem.model_states), gib(c.mem.activations),
                          gib(c.mem.workspace), gib(c.mem.reserved), c.mem.stage, gib(capacity_bytes));
  if (!f.fits) f.fix = fitting_layouts(a, world_size, local_world_size, capacity_bytes);
  return f;
}

}  // namespace tripod::cli
