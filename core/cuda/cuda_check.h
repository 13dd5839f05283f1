// Error checks for CUDA runtime and cuBLAS calls, and DeviceGuard, which makes a device
// current for one scope. Every failing call throws dark::Error naming file, line, the call
// text and the runtime's own error name and string, except a sticky error (is_sticky): then
// the process's CUDA context is broken, every later CUDA call would fail too (freeing
// memory, saving a checkpoint from the device, another rank's collective), and the process
// ends at once with the message (end_process_on_sticky_error).
#pragma once
#include <string>

#include "core/cuda/hang_report.h"
#include "core/cuda/runtime.cuh"
#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"

// Throws dark::Error when CALL (a cudaError_t expression) fails. The error state of a failed
// call is cleared with cudaGetLastError so it is reported once. A kernel that ended itself
// because it hung (hang_report.h) adds what it waited for. A sticky error ends the process.
#define DARK_CUDA_CHECK(CALL)                                                                   \
  do {                                                                                          \
    const cudaError_t dark_cuda_status_ = (CALL);                                               \
    if (dark_cuda_status_ != cudaSuccess) {                                                     \
      (void)cudaGetLastError();                                                                 \
      ::dark::cuda::fail_call(dark_cuda_status_, ::dark::str(__FILE__, ":", __LINE__,           \
                                                             ": CUDA call ", #CALL));           \
    }                                                                                           \
  } while (0)

// Throws dark::Error when CALL (a cublasStatus_t expression) fails; ends the process when the
// failure is the context's sticky error (a kernel before it faulted).
#define DARK_CUBLAS_CHECK(CALL)                                                                 \
  do {                                                                                          \
    const cublasStatus_t dark_cublas_status_ = (CALL);                                          \
    if (dark_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                         \
      const std::string dark_cublas_call_ = ::dark::str(                                        \
          __FILE__, ":", __LINE__, ": cuBLAS call ", #CALL, " failed: ",                        \
          cublasGetStatusName(dark_cublas_status_), " (",                                       \
          cublasGetStatusString(dark_cublas_status_), ")");                                     \
      ::dark::cuda::end_process_if_sticky(dark_cublas_call_);                                   \
      throw ::dark::Error(dark_cublas_call_);                                                   \
    }                                                                                           \
  } while (0)

// Checks the launch of the kernel just started (bad configuration, missing image, ...).
// Faults inside the kernel surface at the next synchronising call.
#define DARK_CUDA_CHECK_LAUNCH() DARK_CUDA_CHECK(cudaGetLastError())

namespace dark::cuda {

// The exit code of a process ended by a sticky CUDA error (EX_SOFTWARE of sysexits.h).
inline constexpr int kStickyErrorExitCode = 70;

// Whether `status` is one of the errors that break the CUDA context for the rest of the
// process (a kernel that trapped, faulted on memory or an instruction, hit a device assert or
// an uncorrectable ECC error, or ran into the display watchdog): every later CUDA call of the
// process returns it again, and nothing clears it.
bool is_sticky(cudaError_t status);

// Ends the process after a sticky error: writes "darkformer: fatal CUDA error: <message>"
// and what to do to stderr, flushes stdout, stderr and the log, and exits with
// kStickyErrorExitCode without running destructors or exit handlers (they would make CUDA
// calls, each failing again). Under mpirun the launcher then ends the other ranks.
[[noreturn]] void end_process_on_sticky_error(const std::string& message);

// A failed runtime call: `call` is "file:line: CUDA call TEXT". Ends the process when
// `status` is sticky, else throws dark::Error; either way the message has the runtime's name
// and text of the error and any hang report.
[[noreturn]] void fail_call(cudaError_t status, const std::string& call);

// Ends the process with `message` when the context holds a sticky error (a failed cuBLAS or
// other library call after a kernel faulted); returns otherwise.
void end_process_if_sticky(const std::string& message);

// Makes device `index` current for the guard's lifetime and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    DARK_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != index) {
      DARK_CUDA_CHECK(cudaSetDevice(index));
      changed_ = true;
    }
  }
  explicit DeviceGuard(const Device& device) : DeviceGuard(cuda_index(device)) {}
  explicit DeviceGuard(const Tensor& t) : DeviceGuard(cuda_index(t.device())) {}
  ~DeviceGuard() {
    if (changed_) (void)cudaSetDevice(previous_);  // destructors must not throw
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  static int cuda_index(const Device& device) {
    DARK_CHECK(device.is_cuda(), "DeviceGuard: ", device.to_string(), " is not a CUDA device");
    return device.index;
  }
  int previous_ = 0;
  bool changed_ = false;
};

}  // namespace dark::cuda
