// Implementation of comm/missing_ranks.h.
#include "comm/missing_ranks.h"

#include <fmt/format.h>

#include "base/error.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace tripod::comm {

std::string name_missing_ranks(Store& store, const GroupSpec& spec, uint64_t seq, const std::string& op,
                               Millis timeout) {
  using Clock = std::chrono::steady_clock;
  try {
    const std::string key = fmt::format("timeout/{}/", seq);
    store.set_str(key + std::to_string(spec.group_rank), op);
    // Members started this collective up to a few seconds apart (a loaded
    // host, a group still connecting), so give them as long to report.
    const auto until = Clock::now() + std::clamp(timeout, Millis{200}, Millis{5000});
    std::vector<int> missing;
    for (;;) {
      missing.clear();
      for (int g = 0; g < int(spec.global_ranks.size()); ++g)
        if (!store.check({key + std::to_string(g)})) missing.push_back(spec.global_ranks[size_t(g)]);
      if (missing.empty() || Clock::now() > until) break;
      std::this_thread::sleep_for(Millis{50});
    }
    if (missing.empty()) return "every member of the group reached this collective";
    std::string list;
    for (int r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
    return fmt::format("global rank(s) [{}] of group {} never reached {} #{} (stuck earlier, "
                       "in another group's collective, or dead)",
                       list, spec.name, op, seq);
  } catch (const std::exception& e) {
    // The store answers from its host's process: when it cannot answer, the
    // host itself is the rank to look at.
    return std::string("(could not ask the store which ranks are missing: ") + e.what() +
           "): the process that hosts the store (global rank 0; torchrun's agent under torchrun) is stuck or dead";
  }
}

std::string name_dead_ranks(Store& store, const GroupSpec& spec, Millis wait,
                            const std::function<void()>& after_report) {
  using Clock = std::chrono::steady_clock;
  try {
    store.set_str("failed/" + std::to_string(spec.group_rank), "1");
    if (after_report) after_report();
    const auto until = Clock::now() + wait;
    std::vector<int> missing;
    for (;;) {
      missing.clear();
      for (int g = 0; g < int(spec.global_ranks.size()); ++g)
        if (!store.check({"failed/" + std::to_string(g)})) missing.push_back(spec.global_ranks[size_t(g)]);
      if (missing.empty() || Clock::now() > until) break;
      std::this_thread::sleep_for(Millis{50});
    }
    if (missing.empty()) return "every member of the group is still running";
    std::string list;
    for (int r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
    return fmt::format("global rank(s) [{}] of group {} did not report the failure within {:.1f} s: they "
                       "exited, were killed or are stuck",
                       list, spec.name, wait.count() / 1e3);
  } catch (const std::exception& e) {
    if (after_report) after_report();
    const auto* te = dynamic_cast<const Error*>(&e);
    return "the rendezvous store is unreachable too (" + (te ? te->message() : std::string(e.what())) +
           "): the process that hosts it (global rank 0; torchrun's agent under torchrun) is stuck or dead";
  }
}

}  // namespace tripod::comm
