// Implementation of config/layout.h: Megatron's masked orthogonal rank
// groups over the "tp-cp-dp-pp" order (see NOTE [Rank order] in layout.h).
#include "config/layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "base/error.h"

namespace tripod::config {

namespace {

std::vector<std::string> split_dashes(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, '-')) out.push_back(item);
  return out;
}

}  // namespace

RankGroups masked_rank_groups(const std::string& order, const std::vector<int>& sizes,
                              const std::string& mask) {
  const std::vector<std::string> dims = split_dashes(order);
  TRIPOD_CHECK(dims.size() == sizes.size(), "order '{}' has {} dims but {} sizes were given",
               order, dims.size(), sizes.size());
  std::vector<bool> in_group(dims.size(), false);
  for (const auto& m : split_dashes(mask)) {
    bool found = false;
    for (size_t i = 0; i < dims.size(); ++i)
      if (dims[i] == m) in_group[i] = found = true;
    TRIPOD_CHECK(found, "mask dim '{}' is not in order '{}'", m, order);
  }
  // stride[i] = product of the sizes of the faster dims.
  std::vector<int> stride(dims.size(), 1);
  for (size_t i = 1; i < dims.size(); ++i) stride[i] = stride[i - 1] * sizes[i - 1];

  std::vector<int> masked, unmasked;
  for (size_t i = 0; i < dims.size(); ++i) (in_group[i] ? masked : unmasked).push_back(int(i));
  auto count = [&](const std::vector<int>& which) {
    int n = 1;
    for (int i : which) n *= sizes[i];
    return n;
  };
  // Decomposes `index` into coordinates over `which` (first dim fastest)
  // and returns their contribution to the global rank.
  auto offset = [&](const std::vector<int>& which, int index) {
    int off = 0;
    for (int i : which) {
      off += (index % sizes[i]) * stride[i];
      index /= sizes[i];
    }
    return off;
  };
  RankGroups groups;
  const int n_groups = count(unmasked), group_size = count(masked);
  for (int g = 0; g < n_groups; ++g) {
    std::vector<int> ranks;
    const int base = offset(unmasked, g);
    for (int m = 0; m < group_size; ++m) ranks.push_back(base + offset(masked, m));
    groups.push_back(std::move(ranks));
  }
  return groups;
}

Layout Layout::make(int world_size, int tp, int pp, int vpp, int cp) {
  TRIPOD_CHECK(world_size >= 1, "world size must be >= 1, got {}", world_size);
  TRIPOD_CHECK_HINT(tp >= 1, "pass --tensor-model-parallel-size 1 or more",
                    "--tensor-model-parallel-size must be >= 1, got {}", tp);
  TRIPOD_CHECK_HINT(pp >= 1, "pass --pipeline-model-parallel-size 1 or more",
                    "--pipeline-model-parallel-size must be >= 1, got {}", pp);
  TRIPOD_CHECK_HINT(vpp >= 1, "leave virtual pipeline stages unset, or >= 1",
                    "virtual pipeline stages per rank must be >= 1, got {}", vpp);
  TRIPOD_CHECK_HINT(cp >= 1, "pass --context-parallel-size 1 or more",
                    "--context-parallel-size must be >= 1, got {}", cp);
  TRIPOD_CHECK_HINT(
      cp == 1 || world_size % (tp * cp * pp) == 0,
      fmt::format("choose sizes whose product tp*cp*pp divides the {} ranks", world_size),
      "world size {} is not divisible by --tensor-model-parallel-size {} x --context-parallel-size {} x "
      "--pipeline-model-parallel-size {} = {}",
      world_size, tp, cp, pp, tp * cp * pp);
  TRIPOD_CHECK_HINT(
      world_size % (tp * pp) == 0,
      fmt::format("choose sizes whose product tp*pp divides the {} ranks (e.g. launch {} ranks)",
                  world_size, ((world_size + tp * pp - 1) / (tp * pp)) * tp * pp),
      "world size {} is not divisible by --tensor-model-parallel-size {} x "
      "--pipeline-model-parallel-size {} = {}",
      world_size, tp, pp, tp * pp);
  TRIPOD_CHECK_HINT(vpp == 1 || pp > 1,
                    "interleaving needs --pipeline-model-parallel-size > 1; drop "
                    "--num-layers-per-virtual-pipeline-stage",
                    "an interleaved schedule ({} virtual stages) with a single pipeline stage", vpp);
  Layout l;
  l.world_size = world_size;
  l.tp = tp;
  l.pp = pp;
  l.cp = cp;
  l.dp = world_size / (tp * cp * pp);
  l.vpp = vpp;
  return l;
}

int Layout::tp_rank(int global) const { return global % tp; }
int Layout::cp_rank(int global) const { return (global / tp) % cp; }
int Layout::dp_rank(int global) const { return (global / (tp * cp)) % dp; }
int Layout::pp_rank(int global) const { return global / (tp * cp * dp); }
int Layout::global_rank(int tp_r, int dp_r, int pp_r, int cp_r) const {
  return tp_r + tp * (cp_r + cp * (dp_r + dp * pp_r));
}

RankGroups Layout::tp_groups() const { return masked_rank_groups(kRankOrder, {tp, cp, dp, pp}, "tp"); }
RankGroups Layout::dp_groups() const { return masked_rank_groups(kRankOrder, {tp, cp, dp, pp}, "dp"); }
RankGroups Layout::pp_groups() const { return masked_rank_groups(kRankOrder, {tp, cp, dp, pp}, "pp"); }
RankGroups Layout::mp_groups() const {
  return masked_rank_groups(kRankOrder, {tp, cp, dp, pp}, "tp-pp");
}
RankGroups Layout::cp_groups() const { return masked_rank_groups(kRankOrder, {tp, cp, dp, pp}, "cp"); }
RankGroups Layout::dp_cp_groups() const {
  return masked_rank_groups(kRankOrder, {tp, cp, dp, pp}, "cp-dp");
}

RankGroups Layout::embd_groups() const {
  RankGroups out;
  for (const auto& g : pp_groups()) {
    // As Megatron: the word embeddings live on the first stage and the tied
    // output layer on the last; their gradients are summed across both.
    if (g.size() > 1) out.push_back({g.front(), g.back()});
    else out.push_back(g);
  }
  return out;
}

Layout Layout::with_expert_parallel(int ep_size, int etp_size) const {
  TRIPOD_CHECK_HINT(ep_size >= 1, "pass --expert-model-parallel-size 1 or more",
                    "--expert-model-parallel-size must be >= 1, got {}", ep_size);
  TRIPOD_CHECK_HINT(etp_size == 1 || etp_size == tp,
                    fmt::format("pass --expert-tensor-parallel-size 1 or {} (the --tensor-model-parallel-size)", tp),
                    "--expert-tensor-parallel-size {}: the experts split over tp ranks other than the dense tp group "
                    "(--tensor-model-parallel-size {}) are not in this version yet",
                    etp_size, tp);
  TRIPOD_CHECK_HINT(world_size % (etp_size * ep_size * pp) == 0,
                    fmt::format("choose an --expert-model-parallel-size that divides the {} ranks of a pipeline stage "
                                "over --expert-tensor-parallel-size (tp x cp x dp / etp = {}; expert-parallel ranks "
                                "fold onto them, as Megatron){}",
                                world_size / pp, world_size / pp / std::max(etp_size, 1),
                                etp_size > 1 ? "; or pass --expert-tensor-parallel-size 1 (whole experts; its default "
                                               "is the --tensor-model-parallel-size, as Megatron's)"
                                             : ""),
                    "world size {} is not divisible by --expert-tensor-parallel-size {} x "
                    "--expert-model-parallel-size {} x --pipeline-model-parallel-size {} = {}",
                    world_size, etp_size, ep_size, pp, etp_size * ep_size * pp);
  Layout l = *this;
  l.ep = ep_size;
  l.etp = etp_size;
  return l;
}

RankGroups Layout::ep_groups() const {
  return masked_rank_groups(kExpertRankOrder, {etp, ep, edp(), pp}, "ep");
}
RankGroups Layout::expert_dp_groups() const {
  return masked_rank_groups(kExpertRankOrder, {etp, ep, edp(), pp}, "dp");
}

std::string Layout::str() const {
  return fmt::format("world {} = tp {}{} x dp {} x pp {} (vpp {})", world_size, tp,
                     cp > 1 ? fmt::format(" x cp {}", cp) : std::string(), dp, pp, vpp) +
         (ep > 1 || etp > 1 ? fmt::format(", experts: {}ep {} x expert-dp {}",
                                          etp > 1 ? fmt::format("etp {} x ", etp) : std::string(), ep, edp())
                            : std::string());
}

}  // namespace tripod::config
