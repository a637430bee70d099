// Implementation of cli/table_flags.h.
#include "cli/table_flags.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <type_traits>

#include "base/error.h"
#include "base/log.h"

namespace tripod::cli {

using train::FlagRow;
using train::FlagStatus;
using train::FlagTakes;

std::vector<std::string> closest_flags(const std::string& unknown, const std::vector<std::string>& known,
                                       size_t n) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  std::vector<std::pair<size_t, std::string>> scored;
  for (const auto& k : known) scored.emplace_back(distance(unknown, k), k);
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  // Only names within about a third of the length: no suggestion beats a wild one.
  const size_t limit = std::max<size_t>(3, unknown.size() / 3);
  for (const auto& [d, k] : scored)
    if (out.size() < n && d <= limit) out.push_back(k);
  return out;
}

CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (end == v.c_str() || *end != '\0') return {};  // not a number: the conversion names it
        if (std::isfinite(x)) return {};
        return fmt::format("'{}' is not a finite number (NaN and infinities are refused)", v);
      },
      "FINITE", "finite");
}

void TableFlags::add_to(CLI::App& app, train::FlagCommand command, train::TrainArgs& args) {
  if (command == train::kTrain) app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  const auto& table = train::flag_table();
  values_.resize(table.size());
  lists_.resize(table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    const FlagRow& f = table[i];
    if (!(f.commands & command)) continue;
    if (f.bound()) {
      CLI::Option* o = std::visit(
          [&](auto* p) -> CLI::Option* {
            using T = std::remove_pointer_t<decltype(p)>;
            if constexpr (std::is_same_v<T, bool>) return app.add_flag(f.name, *p, f.text);
            else if constexpr (std::is_same_v<T, std::vector<std::string>>)
              return app.add_option(f.name, *p, f.text)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
            else if constexpr (std::is_floating_point_v<T>)
              return app.add_option(f.name, *p, f.text)
                  ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
                  ->check(finite_number());
            else return app.add_option(f.name, *p, f.text)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
          },
          f.member(args));
      if (f.show_default) o->capture_default_str();
      if (f.default_text) o->default_str(f.default_text);
      if (f.required && command == train::kTrain) o->required();
      if (f.hidden) o->group("");  // a testing aid
      continue;
    }
    if (f.status == FlagStatus::Implemented || f.status == FlagStatus::TripodOnly) continue;  // --help, --config
    CLI::Option* o = nullptr;
    if (f.takes == FlagTakes::None) o = app.add_flag(f.name);
    else if (f.takes == FlagTakes::Value) o = app.add_option(f.name, values_[i]);
    else
      o = app.add_option(f.name, lists_[i])
              ->expected(0, CLI::detail::expected_max_vector_size)
              ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    o->group("");  // listed in docs/megatron-flags.md, not in --help
    megatron_.emplace_back(&f, o);
  }
  if (command == train::kTrain) app.allow_extras();
}

void TableFlags::apply(const CLI::App& app, bool log_notes) const {
  ErrorList problems;
  apply(app, log_notes, problems);
  problems.throw_if_any("with the flags");
}

void TableFlags::apply(const CLI::App& app, bool log_notes, ErrorList& problems) const {
  std::vector<std::string> unknown;
  for (const auto& a : app.remaining())
    if (a.size() > 1 && a[0] == '-') unknown.push_back(a.substr(0, a.find('=')));
  if (!unknown.empty()) {
    std::vector<std::string> known;
    for (const CLI::Option* o : app.get_options())
      for (const auto& l : o->get_lnames()) known.push_back("--" + l);
    std::string hint;
    for (const auto& u : unknown) {
      const auto near = closest_flags(u, known);
      std::string list;
      for (const auto& k : near) list += (list.empty() ? "" : ", ") + k;
      hint += fmt::format("{}{}: {}", hint.empty() ? "" : "; ", u,
                          near.empty() ? "no similar flag" : "did you mean " + list + "?");
    }
    // Every Megatron-LM flag has a row, so an unknown flag is not one of them.
    problems.add(Error(fmt::format("unknown flag(s) {} (not a Megatron-LM flag either; docs/megatron-flags.md "
                            "lists those tripod takes)",
                            [&] {
                              std::string s;
                              for (const auto& u : unknown) s += (s.empty() ? "" : " ") + u;
                              return s;
                            }()),
                hint));
  }
  std::vector<std::string> stops;
  for (const auto& [f, o] : megatron_) {
    if (o->count() == 0) continue;
    if (f->status == FlagStatus::Rejected)
      stops.push_back(fmt::format("{} is a Megatron-LM flag that tripod does not take: {}", f->name, f->text));
    else if (f->status == FlagStatus::Planned)
      stops.push_back(fmt::format("{} is a Megatron-LM flag that tripod does not take yet: {}", f->name, f->text));
    else if (log_notes)
      log::info("{}: accepted and ignored: {}", f->name, f->text);
  }
  if (stops.empty()) return;
  std::string message = stops.front();
  if (stops.size() > 1) {
    message = fmt::format("{} Megatron-LM flags that tripod does not take:", stops.size());
    for (const auto& s : stops) message += "\n  " + s;
  }
  problems.add(Error(message, "docs/megatron-flags.md lists every Megatron flag and tripod's answer"));
}

}  // namespace tripod::cli
