// Error checks for CUDA runtime and cuBLAS calls, and DeviceGuard, which makes a device
// current for one scope. Every failing call throws dark::Error naming file, line, the call
// text and the runtime's own error name and string.
#pragma once
#include "core/cuda/hang_report.h"
#include "core/cuda/runtime.cuh"
#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"

// Throws dark::Error when CALL (a cudaError_t expression) fails. The sticky error state of
// a failed call is cleared with cudaGetLastError so it is reported once. A kernel that ended
// itself because it hung (hang_report.h) adds what it waited for.
#define DARK_CUDA_CHECK(CALL)                                                                   \
  do {                                                                                          \
    const cudaError_t dark_cuda_status_ = (CALL);                                               \
    if (dark_cuda_status_ != cudaSuccess) {                                                     \
      (void)cudaGetLastError();                                                                 \
      throw ::dark::Error(::dark::str(__FILE__, ":", __LINE__, ": CUDA call ", #CALL,           \
                                      " failed: ", cudaGetErrorName(dark_cuda_status_), " (",   \
                                      cudaGetErrorString(dark_cuda_status_), ")",               \
                                      ::dark::cuda::hang::take_report()));                      \
    }                                                                                           \
  } while (0)

// Throws dark::Error when CALL (a cublasStatus_t expression) fails.
#define DARK_CUBLAS_CHECK(CALL)                                                                 \
  do {                                                                                          \
    const cublasStatus_t dark_cublas_status_ = (CALL);                                          \
    if (dark_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                         \
      throw ::dark::Error(::dark::str(__FILE__, ":", __LINE__, ": cuBLAS call ", #CALL,         \
                                      " failed: ", cublasGetStatusName(dark_cublas_status_),    \
                                      " (", cublasGetStatusString(dark_cublas_status_), ")"));  \
    }                                                                                           \
  } while (0)

// Checks the launch of the kernel just started (bad configuration, missing image, ...).
// Faults inside the kernel surface at the next synchronising call.
#define DARK_CUDA_CHECK_LAUNCH() DARK_CUDA_CHECK(cudaGetLastError())

namespace dark::cuda {

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
