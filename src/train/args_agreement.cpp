// Implementation of train/args_agreement.h. See NOTE [Args agreement].
#include "train/args_agreement.h"

#include <fmt/format.h>

#include <sstream>
#include <thread>

#include "base/error.h"
#include "train/flag_table.h"

namespace tripod::train {
namespace {

constexpr char kPrefix[] = "tripod/args_agreement/";
constexpr char kAgree[] = "ok";

std::string serialize(const FlagValues& v) {
  std::string s;
  for (const auto& [flag, value] : v) s += flag + '\t' + value + '\n';
  return s;
}

FlagValues parse(const std::string& s) {
  FlagValues v;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) {
    const auto tab = line.find('\t');
    if (tab != std::string::npos) v.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return v;
}

}  // namespace

// The rows marked must-agree of the flag table, in its order.
FlagValues agreed_args(const TrainArgs& a) {
  FlagValues v;
  for (const FlagRow& row : flag_table())
    if (row.agree) v.emplace_back(row.name, flag_value(row, a));
  return v;
}

std::string first_difference(const FlagValues& mine, int my_rank, const FlagValues& rank0) {
  for (size_t i = 0; i < mine.size() || i < rank0.size(); ++i) {
    if (i >= mine.size() || i >= rank0.size() || mine[i].first != rank0[i].first)
      return fmt::format("rank {} and rank 0 run different tripod versions (their lists of flags differ)", my_rank);
    if (mine[i].second != rank0[i].second) {
      auto shown = [](const std::string& v) { return v.empty() ? std::string("(empty)") : v; };
      return fmt::format("rank {} has {} {}, rank 0 has {}", my_rank, mine[i].first, shown(mine[i].second),
                         shown(rank0[i].second));
    }
  }
  return "";
}

void check_args_agree(comm::Store& store, int rank, int world_size, const TrainArgs& args,
                      std::chrono::milliseconds timeout) {
  if (world_size <= 1) return;
  const std::string prefix = kPrefix;
  const FlagValues mine = agreed_args(args);
  std::string result;
  if (rank == 0) {
    store.set_str(prefix + "0", serialize(mine));
    std::string first;
    for (int r = 1; r < world_size; ++r) {
      const std::string v = store.get_str(prefix + "verdict/" + std::to_string(r), timeout);
      if (v != kAgree && first.empty()) first = v;
    }
    result = first.empty() ? kAgree : first;
    store.set_str(prefix + "result", result);
    if (result != kAgree) {
      // Rank 0 hosts the store: it stays until every rank has read the verdict,
      // so that each stops with the message, not with a lost connection.
      const auto until = std::chrono::steady_clock::now() + timeout;
      while (store.add(prefix + "read", 0) < world_size - 1 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  } else {
    const FlagValues rank0 = parse(store.get_str(prefix + "0", timeout));
    const std::string diff = first_difference(mine, rank, rank0);
    store.set_str(prefix + "verdict/" + std::to_string(rank), diff.empty() ? kAgree : diff);
    result = store.get_str(prefix + "result", timeout);
    if (result != kAgree) store.add(prefix + "read", 1);
  }
  TRIPOD_CHECK_HINT(result == kAgree,
                    "start every rank with the same flags (only --metrics-file, --tensorboard-dir, --save, --load "
                    "and the tokenizer's file paths may differ)",
                    "the ranks were started with different flags: {}", result);
}

}  // namespace tripod::train
