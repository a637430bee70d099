// `tripod plan --calibrate`: measure the ops of the planned layouts on this
// machine's device with the backend's own kernels (plan/op_profile.h), the
// choice of op times (--op-times) and the measured links (--links).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "plan/op_profile.h"
#include "plan/search.h"

namespace tripod::plan {

// "NVIDIA H200" from "cuda:0 (NVIDIA H200)"; "cpu" for the CPU backend.
std::string device_model_name(const backend::Backend& be);

// Times every op of `ops` that `profile` has not measured yet (one warm-up
// call, then 3 timed calls on a GPU, 1 on the CPU), adds them to
// profile.measured and refits. Returns how many were measured.
int calibrate_ops(backend::Backend& be, const std::vector<OpShape>& ops, OpProfile& profile);


struct OpTimesChoice {
  std::optional<OpProfile> profile;  // nullopt: the assumed-MFU compute model
  std::string note;                        // which op times, for the output
};

// `--op-times` (auto | assumed | h200 | PATH of an op-time file) and
// `--calibrate` on `device` ("cpu" or "cuda", the machine's default already
// chosen by the caller), opened with `open_device`: auto takes this
// machine's calibration cache, else the shipped H200 table. With calibrate,
// `shapes_needed(profile)` lists the ops the plan would add up with that
// profile; the missing ones are measured and the cache is rewritten.
// The distinct ops of the first 64 layouts that fit when `profile` times
// the compute: what --calibrate measures.
std::vector<OpShape> ops_of_fitting_layouts(const GptConfig& m, Machine mc, const SearchOptions& o,
                                            const OpProfile* profile);

using DeviceOpener = std::function<std::unique_ptr<backend::Backend>(const std::string& device)>;
// explain_missing_cache false: the fallback's note does not name the
// missing cache of `device` (a GPU plan made on a machine without a GPU).
OpTimesChoice resolve_op_times(const std::string& op_times, bool calibrate, const std::string& device,
                               const DeviceOpener& open_device,
                               const std::function<std::vector<OpShape>(const OpProfile*)>& shapes_needed,
                               bool explain_missing_cache = true);

// `--links FILE ...`: files written by `tripod bench comm --links-out FILE`
// under the target job's launcher. A group within a node sets the machine's
// intra-node bus bandwidth, one across nodes the inter-node one. Returns the
// output's communication note (which bandwidths were measured, which
// assumed). A missing or malformed file stops with its name.
// A file that also holds an all_to_all figure (`--ops ...,all_to_all`) sets
// *intra_a2a_gbs / *inter_a2a_gbs (the MoE token exchange's link) the same way.
std::string apply_link_files(const std::vector<std::string>& files, double& intra_node_gbs, double& inter_node_gbs,
                             double* intra_a2a_gbs = nullptr, double* inter_a2a_gbs = nullptr);

}  // namespace tripod::plan
