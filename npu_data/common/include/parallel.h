// Spreading a batch's samples over threads, for npu_data's compiled CPU kernels.
#pragma once

#include <ATen/Parallel.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace npu_data_native {

// body(b0, b1) over [0, n), one index at a time (crops differ in cost), on the calling
// thread plus up to at::get_num_threads() - 1 tasks of torch's inter-op pool (persistent
// threads that sleep when idle, unlike an OpenMP team spinning beside DataLoader workers).
// The caller processes indices too and waits only for indices already taken, so a task the
// pool starts late (or never) finds nothing left and cannot block it.
struct SampleQueue {
  std::atomic<int64_t> next{0};
  int64_t n = 0;
  int64_t done = 0;  // guarded by lock
  std::mutex lock;
  std::condition_variable finished;
  const std::function<void(int64_t)>* body = nullptr;  // valid while done < n

  void drain() {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      (*body)(i);
      std::lock_guard<std::mutex> g(lock);
      if (++done == n) finished.notify_all();
    }
  }
};

// True in a process forked after this library loaded (a DataLoader worker): torch's inter-op
// pool there is the parent's, without its threads, and its lock may have been held by one of
// them at the fork (another thread of the parent running a kernel), so at::launch could block
// forever. A forked process starts its own threads for each call instead.
inline std::atomic<bool>& forked_child() {
  static std::atomic<bool> forked{false};
  return forked;
}
inline bool watch_forks() {
  static const bool registered = [] {
    pthread_atfork(nullptr, nullptr, [] { forked_child().store(true); });
    return true;
  }();
  return registered;
}
[[maybe_unused]] static const bool fork_watch_registered = watch_forks();  // at load

// The threads a batch's samples spread over; 0: torch's intra-op count. A forked DataLoader
// worker sets it (the library's set_threads op) and leaves torch's at 1: torch's OpenMP team
// there is the parent's, without its threads, so a parallel torch op can hang (libgomp).
inline std::atomic<int64_t>& thread_setting() {
  static std::atomic<int64_t> threads{0};
  return threads;
}
inline void set_threads(int64_t n) { thread_setting().store(std::max<int64_t>(0, n)); }

template <typename F>
void parallel_for_samples(int64_t n, const F& body) {
  const int64_t set = thread_setting().load(std::memory_order_relaxed);
  const int64_t threads = std::min<int64_t>(set > 0 ? set : std::max(1, at::get_num_threads()), n);
  if (threads <= 1) {
    body(0, n);
    return;
  }
  const std::function<void(int64_t)> one = [&body](int64_t i) { body(i, i + 1); };
  auto q = std::make_shared<SampleQueue>();
  q->n = n;
  q->body = &one;
  if (forked_child().load(std::memory_order_relaxed)) {
    std::vector<std::thread> own;
    for (int64_t t = 1; t < threads; ++t) own.emplace_back([q]() { q->drain(); });
    q->drain();
    for (auto& t : own) t.join();
    return;
  }
  for (int64_t t = 1; t < threads; ++t) at::launch([q]() { q->drain(); });
  q->drain();
  std::unique_lock<std::mutex> g(q->lock);
  q->finished.wait(g, [&q]() { return q->done == q->n; });
}

}  // namespace npu_data_native
