// The typed options of a model and its run, with Megatron-LM's spellings
// for their names (--position-embedding-type, --normalization,
// --recompute-granularity). The kinds marked "next" name where the coming
// features extend the vocabulary: a new enumerator here, its name below,
// and the layer spec (config/layer_spec.h) that carries it.
#pragma once

#include <optional>
#include <string>

namespace tripod::config {

// --position-embedding-type learned_absolute | rope | none
enum class Position { LearnedAbsolute, Rope, None };
// --normalization LayerNorm | RMSNorm
enum class Norm { LayerNorm, RMSNorm };
// A layer's MLP: dense, or a mixture of experts (--num-experts, on the
// layers --moe-layer-freq names; config/moe_config.h).
enum class MlpKind { Dense, Moe };
// A layer's attention. Local today (each rank sees the whole sequence);
// next: split across a context-parallel group (--context-parallel-size).
enum class AttentionKind { Local };

// Activation recomputation (--recompute-granularity; model/gpt_model.h says
// what each keeps):
//   None       keep every activation backward needs
//   Selective  drop the attention core's output and statistics; backward
//              reruns the attention core
//   Full       keep only each layer's input; backward reruns the layer
enum class Recompute { None, Selective, Full };

// Context parallelism's attention exchange (--cp-comm-type; model/context_parallel.h):
//   P2p        K/V blocks around the cp ring, overlapped with the block attention
//   AllGather  all-gather K/V, then the local queries' attention (not overlapped)
//   A2a        all-to-all heads for sequence (DeepSpeed-Ulysses): each rank
//              runs the whole sequence for 1/cp of the heads
enum class CpCommType { P2p, AllGather, A2a };

// Megatron's spellings: "learned_absolute", "LayerNorm", "selective", ...
std::string to_string(Position p);
std::string to_string(Norm n);
std::string to_string(Recompute r);
std::string to_string(CpCommType t);  // "p2p", "all_gather", "a2a"
// nullopt for a name that is not one of the above (the caller names the
// flag or the file in its error).
std::optional<Position> position_from_string(const std::string& s);
std::optional<Norm> norm_from_string(const std::string& s);
std::optional<Recompute> recompute_from_name(const std::string& s);
std::optional<CpCommType> cp_comm_type_from_name(const std::string& s);
// Throws Error naming the accepted values.
Recompute recompute_from_string(const std::string& s);

}  // namespace tripod::config
