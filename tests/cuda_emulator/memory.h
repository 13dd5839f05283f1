// Device memory of the CUDA emulator. Allocations come from one reserved address range that
// is kept inaccessible (PROT_NONE) except while a kernel or an emulated copy runs, so host
// code that dereferences a device pointer crashes here as it would on a GPU, instead of
// working by accident. Every access to device memory happens under the device lock: the
// emulated GPU does one thing at a time, in the order the host asks.
#pragma once
#include <cstddef>
#include <mutex>

namespace dark::cuda_emu {

// The lock every emulated device operation holds (kernels, copies, allocation).
std::recursive_mutex& device_mutex();

// While one exists (on any thread), device memory is readable and writable; it holds the
// device lock for its lifetime.
class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;

 private:
  std::unique_lock<std::recursive_mutex> lock_;
};

// 256-byte aligned device memory, nullptr when the emulated capacity is exhausted.
void* device_malloc(std::size_t bytes);
void device_free(void* ptr);
bool is_device_pointer(const void* ptr);
// The emulated GPU's capacity (default 16 GiB, or DARK_CUDA_EMULATOR_MEMORY_MB) and what is free.
std::size_t device_capacity();
std::size_t device_free_bytes();
void set_device_capacity(std::size_t bytes);

}  // namespace dark::cuda_emu
