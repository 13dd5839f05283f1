// Errors found on the device: kernels flag the lowest bad position (an index out of range, a
// target outside the classes) in one device word with atomicMin, and the host reads it back
// once the kernels are done, to throw the CPU's message. The read is one 8-byte copy that
// waits for the kernels before it.
#pragma once
#include <cstdint>

#include "core/cuda/launch.cuh"
#include "core/tensor.h"

namespace dark::cuda {

class FirstBad {
 public:
  explicit FirstBad(Device device) : slot_(Tensor::empty({1}, DType::i64, device)) {
    DARK_CUDA_CHECK(cudaMemsetAsync(slot(), 0xff, sizeof(unsigned long long), current_stream()));
  }
  unsigned long long* slot() const { return reinterpret_cast<unsigned long long*>(slot_.data<std::int64_t>()); }
  // The lowest flagged position, or -1 when nothing was flagged.
  std::int64_t first() const {
    unsigned long long position = 0;
    DARK_CUDA_CHECK(cudaMemcpy(&position, slot(), sizeof position, cudaMemcpyDeviceToHost));
    return position == ~0ull ? -1 : static_cast<std::int64_t>(position);
  }

 private:
  Tensor slot_;
};

__device__ __forceinline__ void flag_bad(unsigned long long* slot, std::int64_t position) {
  atomicMin(slot, static_cast<unsigned long long>(position));
}

// Element j of an i32 / i64 tensor (on any device), read back for an error message.
inline std::int64_t integer_at(const Tensor& t, std::int64_t j) {
  const char* p = static_cast<const char*>(t.raw_data()) + j * static_cast<std::int64_t>(dtype_size(t.dtype()));
  if (t.dtype() == DType::i32) {
    std::int32_t v = 0;
    DARK_CUDA_CHECK(cudaMemcpy(&v, p, sizeof v, cudaMemcpyDeviceToHost));
    return v;
  }
  std::int64_t v = 0;
  DARK_CUDA_CHECK(cudaMemcpy(&v, p, sizeof v, cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace dark::cuda
