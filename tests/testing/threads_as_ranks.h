// Threads as ranks (c10d's pattern): runs fn(rank, ctx) on `world` threads,
// each with its own DistContext over one in-process HashStore and the Gloo
// communicator; rethrows the first failure after all threads end.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "comm/context.h"

namespace tripod::testing {

inline void run_ranks(int world, std::chrono::milliseconds timeout,
                      const std::function<void(int, comm::DistContext&)>& fn) {
  auto store = std::make_shared<comm::HashStore>(timeout);
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        auto ctx = comm::DistContext::init_with_store(r, world, store, DeviceType::CPU, timeout);
        fn(r, *ctx);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace tripod::testing
