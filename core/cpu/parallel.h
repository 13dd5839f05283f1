// OpenMP helpers for CPU kernels. Work is split into contiguous chunks with a fixed
// assignment (static schedule), so results never depend on timing.
//
// Every `#pragma omp parallel` in the repository runs its body through RegionErrors: an
// exception must not leave a parallel region (OpenMP then calls std::terminate), so each
// thread's first exception is caught there and the caller rethrows it after the region.
#pragma once
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <limits>
#include <mutex>

namespace dark::cpu {

// Carries an exception out of an OpenMP parallel region. Threads run each work item as
// run(order, fn); the error kept is that of the lowest `order` that threw (the one a serial
// loop would have hit first), so the message does not depend on timing. Items ordered after
// a failure are skipped; earlier ones still run, so the lowest failing one is always found.
// After the region, rethrow() throws the kept exception unchanged (e.g. the dark::Error).
class RegionErrors {
 public:
  template <class Fn>
  void run(std::int64_t order, Fn&& fn) noexcept {
    if (order > first_failed_.load(std::memory_order_relaxed)) return;
    try {
      fn();
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (order < first_failed_.load(std::memory_order_relaxed)) {
        first_failed_.store(order, std::memory_order_relaxed);
        error_ = std::current_exception();
      }
    }
  }
  // Call on the thread that opened the region, after it ends.
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  static constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::max();
  std::atomic<std::int64_t> first_failed_{kNone};
  std::mutex mutex_;
  std::exception_ptr error_;
};

// Calls fn(begin, end) over [0, n) in chunks; runs serially when n < grain, where
// thread start-up would cost more than the work. An exception thrown by fn reaches the
// caller (from the lowest chunk that threw).
template <class Fn>
void parallel_for(std::int64_t n, std::int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads <= 1 || n < 2 * grain) {
    fn(std::int64_t{0}, n);
    return;
  }
  const std::int64_t chunks = std::min<std::int64_t>(threads, (n + grain - 1) / grain);
  RegionErrors errors;
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    errors.run(c, [&] { fn(begin, end); });
  }
  errors.rethrow();
}

// Runs task(i) for i in [0, n) on the OpenMP threads (dynamic schedule; each task writes
// disjoint outputs, so timing never changes a result). Nested thread count 1 keeps oneDNN's
// sgemm single-threaded inside a task (the same arithmetic whatever the team size). Returns
// false if any task returned false; a task's exception is rethrown here, after the region.
template <class Task>
bool run_tasks(std::int64_t n, Task&& task) {
  if (n <= 0) return true;
  std::atomic<bool> ok{true};
  RegionErrors errors;
  const int threads = omp_in_parallel() ? 1 : static_cast<int>(std::min<std::int64_t>(omp_get_max_threads(), n));
#pragma omp parallel num_threads(threads)
  {
    omp_set_num_threads(1);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < n; ++i)
      errors.run(i, [&] {
        if (ok.load(std::memory_order_relaxed) && !task(i)) ok.store(false, std::memory_order_relaxed);
      });
  }
  errors.rethrow();
  return ok.load();
}

// Grain sizes: elementwise work per element is cheap; transcendental work is not.
inline constexpr std::int64_t kGrainCheap = 1 << 15;
inline constexpr std::int64_t kGrainHeavy = 1 << 12;

}  // namespace dark::cpu
