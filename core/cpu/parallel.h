// OpenMP helpers for CPU kernels. Work is split into contiguous chunks with a fixed
// assignment (static schedule), so results never depend on timing.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace dark::cpu {

// Calls fn(begin, end) over [0, n) in chunks; runs serially when n < grain, where
// thread start-up would cost more than the work.
template <class Fn>
void parallel_for(std::int64_t n, std::int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads <= 1 || n < 2 * grain) {
    fn(std::int64_t{0}, n);
    return;
  }
  const std::int64_t chunks = std::min<std::int64_t>(threads, (n + grain - 1) / grain);
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    fn(begin, end);
  }
}

// Grain sizes: elementwise work per element is cheap; transcendental work is not.
inline constexpr std::int64_t kGrainCheap = 1 << 15;
inline constexpr std::int64_t kGrainHeavy = 1 << 12;

}  // namespace dark::cpu
