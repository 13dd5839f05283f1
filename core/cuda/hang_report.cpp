// The host side of a hung kernel's report: see hang_report.h.
#include "core/cuda/hang_report.h"

#include <array>
#include <atomic>
#include <mutex>

#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace dark::cuda::hang {
namespace {

constexpr int kMaxDevices = 64;
// Per device: the word as kernels address it, and as the host does (the same address where
// the GPU shares the host's address space). Allocated once, kept for the process.
std::array<std::atomic<std::uint64_t*>, kMaxDevices> device_words{}, host_words{};

const char* kernel_name(unsigned kernel) {
  switch (kernel) {
    case flash_forward: return "forward_sm90_kernel";
    case flash_dq: return "dq_sm90_kernel";
    case flash_dkv: return "dkv_sm90_kernel";
    default: return "an unknown kernel";
  }
}

// The pipelines of each kernel: its fixed operands (0), its streamed tiles (1).
const char* pipeline_name(unsigned kernel, unsigned pipeline) {
  switch (kernel) {
    case flash_forward: return pipeline == 0 ? "Q tile" : "K, V tiles";
    case flash_dq: return pipeline == 0 ? "Q, dO tiles" : "K, V tiles";
    case flash_dkv: return pipeline == 0 ? "K, V tiles" : "Q, dO tiles";
    default: return "?";
  }
}

// A hang's word, decoded (take_report's text after its "; ").
std::string describe(std::uint64_t packed) {
  const unsigned kernel = packed & 3, head_dim = 64u << ((packed >> 2) & 3), pipeline = (packed >> 4) & 1;
  const bool done = (packed >> 5) & 1;
  const unsigned stage = (packed >> 6) & 3, parity = (packed >> 8) & 1;
  return str(kernel_name(kernel), "<", head_dim, ">, ", pipeline_name(kernel, pipeline), ": block (",
             (packed >> 13) & 0x3fffff, ", ", (packed >> 35) & 0x3fff, ", ", (packed >> 49) & 0x3fff, ") warp ",
             (packed >> 9) & 15, " (loading) waited over ", kLimitNanoseconds / 1'000'000'000u, " s for ",
             done ? str("every computing warp to finish (mbarrier done, phase parity ", parity, ")")
                  : str("the computing warps to free stage ", stage, " (mbarrier free, phase parity ", parity, ")"),
             ": a computing warp waits forever (a lost arrival, or registers that never came) or a release is "
             "missing; the kernel ended with __trap()");
}

}  // namespace

std::uint64_t* word(int device) {
  DARK_CHECK(device >= 0 && device < kMaxDevices, "hang report: device index ", device, " out of range");
  if (std::uint64_t* w = device_words[device].load()) return w;
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  if (std::uint64_t* w = device_words[device].load()) return w;
  void* host = nullptr;
  DARK_CUDA_CHECK(cudaHostAlloc(&host, sizeof(std::uint64_t), cudaHostAllocMapped | cudaHostAllocPortable));
  *static_cast<volatile std::uint64_t*>(host) = 0;
  void* mapped = nullptr;
  DARK_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, host, 0));
  host_words[device].store(static_cast<std::uint64_t*>(host));
  device_words[device].store(static_cast<std::uint64_t*>(mapped));
  return static_cast<std::uint64_t*>(mapped);
}

std::string take_report() {
  std::string text;
  for (auto& slot : host_words) {
    std::uint64_t* w = slot.load();
    if (w == nullptr) continue;
    auto* host = reinterpret_cast<volatile std::uint64_t*>(w);
    const std::uint64_t packed = *host;
    if (packed >> 63) {
      text += "; " + describe(packed);
      *host = 0;
    }
  }
  return text;
}

}  // namespace dark::cuda::hang
