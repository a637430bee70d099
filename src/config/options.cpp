// Implementation of config/options.h.
#include "config/options.h"

#include "base/error.h"

namespace tripod::config {

std::string to_string(Position p) {
  return p == Position::Rope ? "rope" : (p == Position::None ? "none" : "learned_absolute");
}

std::string to_string(Norm n) { return n == Norm::RMSNorm ? "RMSNorm" : "LayerNorm"; }

std::string to_string(Recompute r) {
  switch (r) {
    case Recompute::None: return "none";
    case Recompute::Selective: return "selective";
    case Recompute::Full: return "full";
  }
  return "?";
}

std::string to_string(CpCommType t) {
  switch (t) {
    case CpCommType::P2p: return "p2p";
    case CpCommType::AllGather: return "all_gather";
    case CpCommType::A2a: return "a2a";
  }
  return "?";
}

std::optional<CpCommType> cp_comm_type_from_name(const std::string& s) {
  if (s == "p2p") return CpCommType::P2p;
  if (s == "all_gather") return CpCommType::AllGather;
  if (s == "a2a") return CpCommType::A2a;
  return std::nullopt;
}

std::optional<Position> position_from_string(const std::string& s) {
  if (s == "learned_absolute") return Position::LearnedAbsolute;
  if (s == "rope") return Position::Rope;
  if (s == "none") return Position::None;
  return std::nullopt;
}

std::optional<Norm> norm_from_string(const std::string& s) {
  if (s == "LayerNorm") return Norm::LayerNorm;
  if (s == "RMSNorm") return Norm::RMSNorm;
  return std::nullopt;
}

std::optional<Recompute> recompute_from_name(const std::string& s) {
  if (s == "none") return Recompute::None;
  if (s == "selective") return Recompute::Selective;
  if (s == "full") return Recompute::Full;
  return std::nullopt;
}

Recompute recompute_from_string(const std::string& s) {
  if (auto r = recompute_from_name(s)) return *r;
  TRIPOD_FAIL("unknown recompute granularity '{}': use none, selective or full", s);
}

}  // namespace tripod::config
