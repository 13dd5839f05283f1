// The CUDA DeviceBackend: raw device memory (cudaMalloc / cudaFree on the given device),
// copies between host and devices, synchronisation and device discovery. Registered for
// DeviceType::cuda when the library loads. All work runs on the legacy default stream, so
// a copy is ordered after every kernel launched before it on the same device; host-to-device
// copies up to 64 MiB go through pinned staging buffers and do not make the host wait.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "core/backend.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"

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
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;  // the caching allocator empties its cache and tries again
  }
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

// Host-to-device copies that do not make the host wait: the bytes go into one of a ring of
// pinned staging buffers (the host waits only when that buffer's previous copy is still
// running) and are copied from there with cudaMemcpyAsync on the legacy stream, so the copy
// runs after the work already queued and before the work queued next, as a kernel would.
// Copies above kMaxStaged bytes (checkpoint loads) are plain synchronous cudaMemcpy.
class Staging {
 public:
  static constexpr std::size_t kMaxStaged = std::size_t{64} << 20;
  static constexpr int kSlots = 8;

  void copy(void* dst, const void* src, std::size_t bytes) {
    std::lock_guard lock(mutex_);
    Slot& slot = slots_[next_];
    next_ = (next_ + 1) % kSlots;
    if (slot.event) DARK_CUDA_CHECK(cudaEventSynchronize(slot.event));  // its previous copy is done
    else DARK_CUDA_CHECK(cudaEventCreateWithFlags(&slot.event, cudaEventDisableTiming));
    if (slot.capacity < bytes) {
      if (slot.buffer) DARK_CUDA_CHECK(cudaFreeHost(slot.buffer));
      slot.buffer = nullptr;
      slot.capacity = std::max<std::size_t>(bytes, std::size_t{1} << 16);
      DARK_CUDA_CHECK(cudaHostAlloc(&slot.buffer, slot.capacity, cudaHostAllocDefault));
    }
    std::memcpy(slot.buffer, src, bytes);
    DARK_CUDA_CHECK(cudaMemcpyAsync(dst, slot.buffer, bytes, cudaMemcpyHostToDevice, cudaStreamLegacy));
    DARK_CUDA_CHECK(cudaEventRecord(slot.event, cudaStreamLegacy));
  }

 private:
  struct Slot {
    void* buffer = nullptr;
    std::size_t capacity = 0;
    cudaEvent_t event = nullptr;
  };
  std::mutex mutex_;
  Slot slots_[kSlots];
  int next_ = 0;
};

// One per device, created on first use and kept (pinned memory outlives static destruction
// of the runtime otherwise).
Staging& staging_for(int device_index) {
  constexpr int kMaxDevices = 64;
  static std::mutex mutex;
  static Staging* staging[kMaxDevices] = {};
  DARK_CHECK(device_index >= 0 && device_index < kMaxDevices, "cuda:", device_index, ": device index out of range");
  std::lock_guard lock(mutex);
  if (!staging[device_index]) staging[device_index] = new Staging;
  return *staging[device_index];
}

// The stream graphs of a device are captured on: created once, blocking (so the legacy
// stream's work and its own stay ordered), kept for the life of the process.
cudaStream_t capture_stream(int device_index) {
  constexpr int kMaxDevices = 64;
  static std::mutex mutex;
  static cudaStream_t streams[kMaxDevices] = {};
  DARK_CHECK(device_index >= 0 && device_index < kMaxDevices, "cuda:", device_index, ": device index out of range");
  std::lock_guard lock(mutex);
  if (!streams[device_index]) {
    DeviceGuard guard(device_index);
    DARK_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[device_index], cudaStreamDefault));
  }
  return streams[device_index];
}

// A copy the host takes part in cannot be captured: it would run at capture time (the host
// side) and at launch time (the device side) with different data.
void refuse_host_copy_in_capture(Device src, Device dst) {
  DARK_CHECK(current_stream() == nullptr, "a copy from ", src.to_string(), " to ", dst.to_string(),
             " inside a CUDA graph capture: the captured work must keep its data on the device (copy inputs "
             "into the tensors the graph reads before launching it, and read outputs after)");
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
      return;
    }
    if (src_device.is_cpu() || dst_device.is_cpu() || src_device.index != dst_device.index)
      refuse_host_copy_in_capture(src_device, dst_device);
    if (src_device.is_cpu()) {
      DeviceGuard guard(dst_device.index);
      if (bytes <= Staging::kMaxStaged) staging_for(dst_device.index).copy(dst, src, bytes);
      else DARK_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    } else if (dst_device.is_cpu()) {
      DeviceGuard guard(src_device.index);
      DARK_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
    } else if (src_device.index == dst_device.index) {
      // In order with the kernels on the same stream; the host does not wait (nothing it
      // does reads device memory without a copy that waits).
      DeviceGuard guard(src_device.index);
      DARK_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, current_stream()));
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

  // Kernel profiles: CUDA events on the legacy stream, where every kernel runs.
  void* record_timing_event() const override {
    cudaEvent_t event = nullptr;
    DARK_CUDA_CHECK(cudaEventCreate(&event));
    DARK_CUDA_CHECK(cudaEventRecord(event, cudaStreamLegacy));
    return event;
  }
  double elapsed_ms(void* start, void* end) const override {
    float ms = 0;
    DARK_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(end)));
    DARK_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
    return ms;
  }
  void release_timing_event(void* event) const override { DARK_CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(event))); }

  void begin_capture(int device_index) const override {
    DARK_CHECK(current_stream() == nullptr, "cuda:", device_index,
               ": a CUDA graph capture is already under way on this thread");
    const cudaStream_t stream = capture_stream(device_index);
    DeviceGuard guard(device_index);
    // Relaxed: cudaMalloc stays allowed (the allocator may need a block the capture's pool
    // does not have yet); work on the legacy stream and synchronisations are still refused.
    DARK_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    current_stream_slot() = stream;
  }
  void* end_capture(int device_index) const override {
    const cudaStream_t stream = current_stream();
    DARK_CHECK(stream != nullptr, "cuda:", device_index, ": no CUDA graph capture is under way on this thread");
    current_stream_slot() = nullptr;
    DeviceGuard guard(device_index);
    cudaGraph_t graph = nullptr;
    const cudaError_t status = cudaStreamEndCapture(stream, &graph);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      if (graph) (void)cudaGraphDestroy(graph);
      throw Error(str("cuda:", device_index, ": the CUDA graph capture failed: ", cudaGetErrorName(status), " (",
                      cudaGetErrorString(status), "); something in the captured work ran on the legacy stream or "
                      "waited for the device (the first error thrown inside the capture names it)"));
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    DARK_CUDA_CHECK(instantiated);
    return exec;
  }
  void launch_graph(void* graph, int device_index) const override {
    DeviceGuard guard(device_index);
    DARK_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), cudaStreamLegacy));
  }
  void release_graph(void* graph) const override {
    if (graph) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph));  // from destructors: no throw
  }

  std::pair<std::size_t, std::size_t> memory_info(int device_index) const override {
    DeviceGuard guard(device_index);
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      return {0, 0};
    }
    return {free_bytes, total_bytes};
  }
};

CudaBackend backend_instance;

#if defined(DARK_CUDA_EMULATOR)
const bool registered = [] {  // when a test installs the emulator (see DARK_REGISTER_KERNEL)
  cuda_emu::on_install([] { replace_backend(DeviceType::cuda, &backend_instance, cuda_emu::kBackendName); });
  return true;
}();
#else
const bool registered = [] {
  register_backend(DeviceType::cuda, &backend_instance, "the CUDA runtime");
  return true;
}();
#endif

}  // namespace
}  // namespace dark::cuda
