// Where a stretch of work spends its device time, kernel by kernel (darkformer_bench_train
// --profile). While a KernelProfile is alive, every kernel dispatched through a KernelTable
// (core/dispatch.h) is bracketed by two timing events of its device's backend
// (DeviceBackend::record_timing_event): on a GPU, CUDA events recorded in stream order, so
// the work is never synchronised kernel by kernel; on the CPU, whose kernels return when
// done, host times. The events are read when the profile finishes. A kernel dispatched from
// inside another kernel counts in the outer one only. Each kernel is attributed to the pass
// named by the innermost ProfilePass alive at its dispatch ("forward", "backward", ...).
// Off (no profile alive), dispatch costs one relaxed atomic load.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace dark {

class KernelProfile {
 public:
  struct Row {
    std::string pass;    // "" outside any ProfilePass
    std::string kernel;  // the KernelTable's name, e.g. "matmul"
    DeviceType device = DeviceType::cpu;
    std::int64_t calls = 0;
    double ms = 0;  // summed device time
    // Summed over the calls: the sizes of the tensors each was handed (inputs and outputs
    // once each: a lower bound on its memory traffic, exact for one-pass kernels; a tiled
    // kernel such as flash attention reads some many times) and, for matmul, 2 m n k per
    // product. bytes / ms is the "effective bandwidth" of the kernel.
    double bytes = 0, flops = 0;
  };

  KernelProfile();  // one at a time per process; throws when another is alive
  ~KernelProfile();
  KernelProfile(const KernelProfile&) = delete;
  KernelProfile& operator=(const KernelProfile&) = delete;

  // Ends the profile (waits for the devices' timed work) and returns the time summed by
  // (pass, kernel, device), largest first.
  std::vector<Row> finish();

  static bool active() { return active_.load(std::memory_order_relaxed); }

 private:
  static inline std::atomic<bool> active_{false};
  bool finished_ = false;
};

// Names the pass that the kernels dispatched while it lives belong to (nests; thread-local).
// `name` must outlive the profile: a string literal.
class ProfilePass {
 public:
  explicit ProfilePass(const char* name);
  ~ProfilePass();
  ProfilePass(const ProfilePass&) = delete;
  ProfilePass& operator=(const ProfilePass&) = delete;

 private:
  const char* previous_;
};

namespace profile_detail {
// What one kernel call moves and computes, counted from its arguments (see Row).
struct Work {
  double bytes = 0, flops = 0;
};
// Tensors and GemmShapes are recognised by their members (this header comes before both).
template <class Arg>
void count(Work& work, const Arg& arg) {
  if constexpr (requires { arg.numel(); arg.dtype(); arg.defined(); }) {
    if (arg.defined()) work.bytes += static_cast<double>(arg.numel()) * static_cast<double>(dtype_size(arg.dtype()));
  } else if constexpr (requires { arg.batch; arg.m; arg.n; arg.k; }) {
    work.flops += 2.0 * static_cast<double>(arg.batch) * static_cast<double>(arg.m) * static_cast<double>(arg.n) *
                  static_cast<double>(arg.k);
  }
}

// Brackets one kernel call while a profile is active (used by KernelTable's dispatch).
class KernelTimer {
 public:
  KernelTimer(const char* kernel, DeviceType device, const Work& work);
  ~KernelTimer();
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;

 private:
  const char* kernel_;
  DeviceType device_;
  Work work_;
  void* start_ = nullptr;  // null: not timed (nested, or the profile ended meanwhile)
};
}  // namespace profile_detail

}  // namespace dark
