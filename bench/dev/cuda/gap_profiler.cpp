// Where a GPU run's idle time goes, without Nsight Systems: a CUPTI
// injection library. The CUDA driver loads it into any program when
//   CUDA_INJECTION64_PATH=/path/libgap_profiler.so
// is set (no change to the program). It records every kernel, memcpy,
// memset and host synchronisation with CUPTI's activity API and, at exit,
// prints for the steady part of the run (the last GAP_PROFILER_WINDOW_MS
// milliseconds of the GPU timeline, else its last GAP_PROFILER_TAIL
// fraction, default 0.5; a training run's start-up is slow host work):
//   - the span, the time with a kernel or copy running, and the idle rest;
//   - idle time grouped by what ended before the gap and what began after
//     it (so "after cudaStreamSynchronize, before <kernel>" shows a host
//     stall), the largest groups first;
//   - the kernels by total time;
//   - the host synchronisations (count and total wait).
// GAP_PROFILER_MIN_US (default 5) ignores shorter gaps (launch latency).
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Event {
  uint64_t start, end;
  std::string name;
  int kind;  // 0 kernel, 1 memcpy, 2 memset, 3 host sync
};

std::mutex mu;
std::vector<Event>* events = nullptr;

std::string demangle(const char* s) {
  int status = 0;
  char* d = abi::__cxa_demangle(s, nullptr, nullptr, &status);
  std::string r = status == 0 && d ? d : s;
  std::free(d);
  for (const std::string drop : {"(anonymous namespace)::", "void ", "tripod::backend::cuda::"})
    for (size_t at; (at = r.find(drop)) != std::string::npos;) r.erase(at, drop.size());
  // Template arguments and parameter lists make names unreadable: keep the
  // function's own name.
  const size_t paren = r.find('(');
  if (paren != std::string::npos) r.resize(paren);
  if (r.size() > 90) r = r.substr(0, 90) + "...";
  return r;
}

const char* memcpy_kind(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
    default: return "memcpy other";
  }
}

const char* sync_kind(CUpti_ActivitySynchronizationType t) {
  switch (t) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE: return "cudaEventSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT: return "cudaStreamWaitEvent";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE: return "cudaStreamSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE: return "cudaDeviceSynchronize";
    default: return "sync other";
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 8 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::vector<Event> got;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(rec);
        got.push_back({k->start, k->end, demangle(k->name), 0});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(rec);
        got.push_back({m->start, m->end, memcpy_kind(m->copyKind), 1});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = reinterpret_cast<CUpti_ActivityMemset4*>(rec);
        got.push_back({m->start, m->end, "memset", 2});
        break;
      }
      case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        auto* s = reinterpret_cast<CUpti_ActivitySynchronization2*>(rec);
        got.push_back({s->start, s->end, sync_kind(s->type), 3});
        break;
      }
      default: break;
    }
  }
  std::free(buffer);
  std::lock_guard lk(mu);
  events->insert(events->end(), got.begin(), got.end());
}

double env_double(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atof(v) : fallback;
}

void report() {
  cuptiActivityFlushAll(1);
  std::lock_guard lk(mu);
  std::vector<Event> gpu, syncs;
  for (const Event& e : *events) (e.kind == 3 ? syncs : gpu).push_back(e);
  if (gpu.empty()) {
    std::fprintf(stderr, "[gap_profiler] no GPU activity recorded\n");
    return;
  }
  std::sort(gpu.begin(), gpu.end(), [](const Event& a, const Event& b) { return a.start < b.start; });
  const uint64_t first = gpu.front().start;
  uint64_t last = 0;
  for (const Event& e : gpu) last = std::max(last, e.end);
  const double tail = std::clamp(env_double("GAP_PROFILER_TAIL", 0.5), 0.01, 1.0);
  const double window_ms = env_double("GAP_PROFILER_WINDOW_MS", 0);
  uint64_t from = last - static_cast<uint64_t>(tail * static_cast<double>(last - first));
  if (window_ms > 0) from = last - std::min<uint64_t>(last - first, static_cast<uint64_t>(window_ms * 1e6));
  const uint64_t min_gap = static_cast<uint64_t>(env_double("GAP_PROFILER_MIN_US", 5) * 1e3);

  // Walk the GPU timeline (union of intervals) from `from`: idle stretches
  // are attributed to (what ended last, what starts next); host syncs that
  // end inside a gap are named in it.
  std::sort(syncs.begin(), syncs.end(), [](const Event& a, const Event& b) { return a.end < b.end; });
  std::map<std::string, std::pair<double, int>> gaps;  // key -> (ns, count)
  std::map<std::string, std::pair<double, int>> kernels;
  double busy = 0, idle = 0, small_idle = 0;
  uint64_t cursor = from;
  std::string before = "(start of window)";
  size_t si = 0;
  for (const Event& e : gpu) {
    if (e.end <= from) continue;
    const uint64_t s = std::max(e.start, from);
    if (s > cursor) {
      const uint64_t g = s - cursor;
      if (g >= min_gap) {
        std::string during;
        while (si < syncs.size() && syncs[si].end < cursor) ++si;
        for (size_t j = si; j < syncs.size() && syncs[j].end <= s; ++j) during = " [host waited: " + syncs[j].name + "]";
        auto& slot = gaps[before + "  ->  " + e.name + during];
        slot.first += static_cast<double>(g);
        slot.second += 1;
        idle += static_cast<double>(g);
      } else {
        small_idle += static_cast<double>(g);
      }
    }
    if (e.end > cursor) {
      busy += static_cast<double>(e.end - std::max(s, cursor));
      cursor = e.end;
      before = e.name;
    }
    auto& k = kernels[e.name];
    k.first += static_cast<double>(e.end - e.start);
    k.second += 1;
  }
  const double span = static_cast<double>(last - from);
  std::fprintf(stderr,
               "[gap_profiler] window (GAP_PROFILER_WINDOW_MS, else the last %.0f%% of the timeline): span %.1f ms, busy %.1f ms, idle %.1f ms in gaps >= "
               "%.0f us + %.1f ms in shorter ones\n",
               tail * 100, span / 1e6, busy / 1e6, idle / 1e6, static_cast<double>(min_gap) / 1e3, small_idle / 1e6);
  std::vector<std::pair<std::string, std::pair<double, int>>> g(gaps.begin(), gaps.end());
  std::sort(g.begin(), g.end(), [](auto& a, auto& b) { return a.second.first > b.second.first; });
  std::fprintf(stderr, "[gap_profiler] idle by (last GPU work -> next GPU work):\n");
  for (size_t i = 0; i < g.size() && i < 25; ++i)
    std::fprintf(stderr, "  %9.2f ms %6d x  %s\n", g[i].second.first / 1e6, g[i].second.second, g[i].first.c_str());
  std::vector<std::pair<std::string, std::pair<double, int>>> k(kernels.begin(), kernels.end());
  std::sort(k.begin(), k.end(), [](auto& a, auto& b) { return a.second.first > b.second.first; });
  std::fprintf(stderr, "[gap_profiler] GPU work by total time in the window:\n");
  for (size_t i = 0; i < k.size() && i < 40; ++i)
    std::fprintf(stderr, "  %9.2f ms %6d x  %s\n", k[i].second.first / 1e6, k[i].second.second, k[i].first.c_str());
  std::map<std::string, std::pair<double, int>> sync_sum;
  for (const Event& e : syncs)
    if (e.end > from) {
      auto& s = sync_sum[e.name];
      s.first += static_cast<double>(e.end - e.start);
      s.second += 1;
    }
  std::fprintf(stderr, "[gap_profiler] host synchronisations in the window:\n");
  for (auto& [name, s] : sync_sum) std::fprintf(stderr, "  %9.2f ms %6d x  %s\n", s.first / 1e6, s.second, name.c_str());
}

}  // namespace

extern "C" int InitializeInjection() {
  events = new std::vector<Event>();
  events->reserve(1 << 20);
  cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
  std::atexit(report);
  return 1;
}
