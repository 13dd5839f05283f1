// What a failed CUDA call does: see cuda_check.h.
#include "core/cuda/cuda_check.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>

namespace dark::cuda {

bool is_sticky(cudaError_t status) {
  switch (status) {
    case cudaErrorLaunchFailure:        // __trap(), and faults the driver names no better
    case cudaErrorIllegalAddress:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

void end_process_on_sticky_error(const std::string& message) {
  const bool hang = message.find("ended with __trap()") != std::string::npos;
  std::fflush(stdout);
  if (auto logger = spdlog::default_logger()) logger->flush();
  std::fprintf(stderr,
               "darkformer: fatal CUDA error: %s\n"
               "darkformer: the error is sticky: this process's CUDA context is broken and every later CUDA call "
               "would fail, so the process ends here (exit %d). Run it again%s.\n",
               message.c_str(), kStickyErrorExitCode,
               hang ? "; a Hopper (sm_90) flash kernel hung: DARK_FLASH_SM90=off runs the mma.sync kernels instead "
                      "(scripts/gpu-check.sh does so by itself after its flash-sm90 stage fails)"
                    : "");
  std::fflush(stderr);
  std::_Exit(kStickyErrorExitCode);
}

void fail_call(cudaError_t status, const std::string& call) {
  const std::string message = str(call, " failed: ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")",
                                  hang::take_report());
  if (is_sticky(status)) end_process_on_sticky_error(message);
  throw Error(message);
}

void end_process_if_sticky(const std::string& message) {
  const cudaError_t status = cudaPeekAtLastError();
  if (is_sticky(status))
    end_process_on_sticky_error(str(message, "; the context's error: ", cudaGetErrorName(status), " (",
                                    cudaGetErrorString(status), ")", hang::take_report()));
}

}  // namespace dark::cuda
