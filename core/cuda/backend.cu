// The CUDA DeviceBackend: raw device memory (cudaMalloc / cudaFree on the given device),
// copies between host and devices, synchronisation and device discovery. Registered for
// DeviceType::cuda when the library loads. All work runs on the legacy default stream, so
// a copy is ordered after every kernel launched before it on the same device.
#include <cstdio>
#include <cstring>

#include "core/backend.h"
#include "core/cuda/cuda_check.h"

namespace dark::cuda {
namespace {

int query_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver, no device, ...: not an error, just none
    return 0;
  }
  return count;
}

int device_count_once() {
  static const int count = query_device_count();
  return count;
}

void* device_allocate(std::size_t bytes, int device_index) {
  if (bytes == 0) return nullptr;
  const int count = device_count_once();
  DARK_CHECK(device_index >= 0 && device_index < count, "cuda:", device_index,
             ": no such CUDA device (", count, " usable; is the driver installed and a GPU visible?)");
  DeviceGuard guard(device_index);
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(str("cuda:", device_index, ": cudaMalloc of ", bytes, " bytes failed: ",
                    cudaGetErrorName(status), " (", cudaGetErrorString(status), ")"));
  }
  return ptr;
}

// Called from destructors, so it reports instead of throwing. At process exit the runtime
// may already be unloaded; freeing then is pointless and silently skipped.
void device_release(void* ptr, int device_index) {
  if (ptr == nullptr) return;
  int previous = 0;
  const bool have_previous = cudaGetDevice(&previous) == cudaSuccess;
  cudaError_t status = cudaSetDevice(device_index);
  if (status == cudaSuccess) status = cudaFree(ptr);
  if (have_previous && previous != device_index) (void)cudaSetDevice(previous);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    if (status != cudaErrorCudartUnloading && status != cudaErrorContextIsDestroyed)
      std::fprintf(stderr, "darkformer: cuda:%d: cudaFree failed: %s (%s)\n", device_index,
                   cudaGetErrorName(status), cudaGetErrorString(status));
  }
}

class CudaBackend final : public DeviceBackend {
 public:
  RawAllocator raw_allocator() const override { return {&device_allocate, &device_release}; }

  int device_count() const override { return device_count_once(); }

  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            std::size_t bytes) const override {
    if (bytes == 0) return;
    if (dst_device.is_cpu() && src_device.is_cpu()) {
      std::memcpy(dst, src, bytes);
    } else if (src_device.is_cpu()) {
      DeviceGuard guard(dst_device.index);
      DARK_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    } else if (dst_device.is_cpu()) {
      DeviceGuard guard(src_device.index);
      DARK_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
    } else if (src_device.index == dst_device.index) {
      DeviceGuard guard(src_device.index);
      DARK_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
      DARK_CUDA_CHECK(cudaStreamSynchronize(0));
    } else {
      DeviceGuard guard(dst_device.index);
      DARK_CUDA_CHECK(cudaMemcpyPeer(dst, dst_device.index, src, src_device.index, bytes));
      DARK_CUDA_CHECK(cudaDeviceSynchronize());
    }
  }

  void synchronize(int device_index) const override {
    DeviceGuard guard(device_index);
    DARK_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

CudaBackend backend_instance;

const bool registered = [] {
  register_backend(DeviceType::cuda, &backend_instance);
  return true;
}();

}  // namespace
}  // namespace dark::cuda
