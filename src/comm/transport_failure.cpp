// Implementation of comm/transport_failure.h.
#include "comm/transport_failure.h"

#include <unistd.h>

#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <regex>

#include <fmt/format.h>

namespace tripod::comm {
namespace {

std::mutex g_mu;
std::map<uint64_t, std::string>& in_flight() {
  static auto* m = new std::map<uint64_t, std::string>();  // never destroyed: used at exit
  return *m;
}
uint64_t g_next = 1;

[[noreturn]] void on_terminate() noexcept {
  std::string what = "std::terminate was called without an exception";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
      what = "an exception of unknown type";
    }
  }
  std::string msg;
  try {
    msg = transport_failure_message(what);
  } catch (...) {
    msg = "tripod: error: an uncaught exception ended this process: " + what + "\n";
  }
  std::fputs(msg.c_str(), stderr);
  std::fflush(stderr);
  std::fflush(stdout);
  ::_exit(2);
}

}  // namespace

void install_transport_failure_handler() {
  static std::once_flag once;
  std::call_once(once, [] { std::set_terminate(on_terminate); });
}

InFlight::InFlight(std::string what) {
  std::lock_guard<std::mutex> lock(g_mu);
  id_ = g_next++;
  in_flight()[id_] = std::move(what);
}

void InFlight::finish() {
  if (id_ == 0) return;
  std::lock_guard<std::mutex> lock(g_mu);
  in_flight().erase(id_);
  id_ = 0;
}

std::string explain_transport_error(const std::string& what) {
  static const std::regex size_check(R"(op\.preamble\.length <= op\.nbytes\. (\d+) vs (\d+))");
  std::smatch m;
  if (!std::regex_search(what, m, size_check)) return what;
  return fmt::format("a peer sent a message of {} bytes where this rank posted {} bytes: the ranks called "
                     "this collective with different sizes (transport: {})",
                     m[1].str(), m[2].str(), what);
}

std::string transport_failure_message(const std::string& exception_what) {
  std::string ops;
  {
    // The thread that failed may hold nothing, but another could be stuck
    // holding the lock: do not wait for it.
    std::unique_lock<std::mutex> lock(g_mu, std::try_to_lock);
    if (lock.owns_lock())
      for (const auto& [id, w] : in_flight()) ops += "\n  in flight: " + w;
  }
  const bool sizes = exception_what.find("op.preamble.length") != std::string::npos;
  std::string msg =
      ops.empty() && !sizes
          ? fmt::format("tripod: error: an exception escaped a thread (no collective was in flight): {}\n",
                        exception_what)
          : fmt::format("tripod: error: communication failed in a transport thread: {}{}\n",
                        explain_transport_error(exception_what),
                        ops.empty() ? "\n  in flight: no collective of this process" : ops);
  msg += sizes ? "  hint: every rank must call each collective with the same sizes; ranks started with "
                 "different model, batch or layout flags do not (start every rank with the same flags)\n"
               : "  hint: a peer process probably exited or sent unexpected data; look for the first failing "
                 "rank\n";
  return msg;
}

}  // namespace tripod::comm
