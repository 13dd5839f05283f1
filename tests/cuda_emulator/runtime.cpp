// The CUDA runtime API of the emulator (see runtime.h): one emulated device ("cuda:0", an
// H100/H200-like compute capability 9.0 with 132 multiprocessors), whose streams all are
// the one device queue. Copies check that device pointers are device pointers, so a host
// pointer passed as a device pointer fails here as it does on a GPU.
#include "cuda_emulator/runtime.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string_view>
#include <vector>

#include "core/backend.h"
#include "cuda_emulator/control.h"
#include "cuda_emulator/memory.h"

namespace {

// The emulated kernels are compiled with FMA instructions (contraction as nvcc does it,
// CMakeLists.txt): on a CPU without them, say so at load instead of dying of an illegal
// instruction in the first kernel.
[[maybe_unused]] const bool cpu_has_fma = [] {
#if defined(__x86_64__) || defined(__i386__)
  if (!__builtin_cpu_supports("fma")) {
    std::fprintf(stderr, "CUDA emulator: this CPU has no FMA instructions, which the emulated kernels use "
                         "(they contract a * b + c as nvcc does); build with -DDARK_BUILD_CUDA_EMULATOR=OFF\n");
    std::abort();
  }
#endif
  return true;
}();

using dark::cuda_emu::DeviceAccess;
using dark::cuda_emu::is_device_pointer;

constexpr int kDevices = 1;
thread_local int current_device = 0;
thread_local cudaError_t last_error = cudaSuccess;

std::uint64_t to_host_copies = 0;

// 132 like an H100 / H200, or DARK_CUDA_EMULATOR_SMS (kernels that size their grids by the
// multiprocessor count can so be tested with few, large work items).
int multiprocessors() {
  static const int sms = [] {
    const char* env = std::getenv("DARK_CUDA_EMULATOR_SMS");
    return env ? std::max(1, std::atoi(env)) : 132;
  }();
  return sms;
}

// 9.0 like an H100 / H200, or DARK_CUDA_EMULATOR_CC (80: an A100), so that the kernels a
// host picks by compute capability can all be run here.
int compute_capability() {
  static const int cc = [] {
    const char* env = std::getenv("DARK_CUDA_EMULATOR_CC");
    return env ? std::max(10, std::atoi(env)) : 90;
  }();
  return cc;
}

cudaError_t fail(cudaError_t e) {
  last_error = e;
  return e;
}

// After a kernel trapped (control.h: context_broken), every call that needs the device
// returns the sticky error, as a GPU's broken context does.
#define DARK_EMU_RETURN_IF_BROKEN()                                                       \
  do {                                                                                    \
    if (::dark::cuda_emu::context_broken()) return fail(cudaErrorLaunchFailure);          \
  } while (0)

bool valid_kind(const void* dst, const void* src, cudaMemcpyKind kind) {
  const bool dst_dev = is_device_pointer(dst), src_dev = is_device_pointer(src);
  switch (kind) {
    case cudaMemcpyHostToHost: return !dst_dev && !src_dev;
    case cudaMemcpyHostToDevice: return dst_dev && !src_dev;
    case cudaMemcpyDeviceToHost: return !dst_dev && src_dev;
    case cudaMemcpyDeviceToDevice: return dst_dev && src_dev;
    case cudaMemcpyDefault: return true;
  }
  return false;
}

struct Event {
  std::chrono::steady_clock::time_point at{};
  bool timing = true;
};
struct Stream {};

bool is_legacy(cudaStream_t s) { return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread; }

// Graphs: the nodes of a capture, in the order they were queued.
using Nodes = std::vector<std::function<void()>>;
struct Graph {
  Nodes nodes;
};
struct GraphExec {
  Nodes nodes;
};

// The capture under way, if any (one at a time; the emulated device has one queue).
struct Capture {
  cudaStream_t stream = nullptr;  // null: none under way
  bool invalidated = false;
  Nodes nodes;
};
std::mutex capture_mutex;
Capture capture;
std::uint64_t launched_graphs = 0;

bool capturing() {
  std::lock_guard lock(capture_mutex);
  return capture.stream != nullptr;
}

// A call CUDA refuses while a capture is under way: the capture is invalidated.
cudaError_t refuse_in_capture(cudaError_t e) {
  {
    std::lock_guard lock(capture_mutex);
    capture.invalidated = true;
  }
  return fail(e);
}

}  // namespace

cudaError_t dark::cuda_emu::run_or_record(cudaStream_t stream, std::function<cudaError_t()> work) {
  DARK_EMU_RETURN_IF_BROKEN();
  {
    std::lock_guard lock(capture_mutex);
    if (capture.stream != nullptr && is_legacy(stream)) {
      capture.invalidated = true;
      return fail(cudaErrorStreamCaptureImplicit);
    }
    if (capture.stream != nullptr && stream == capture.stream) {
      capture.nodes.push_back([work = std::move(work)] {
        const cudaError_t e = work();
        if (e != cudaSuccess) device_fault(std::string("a node of a launched graph failed: ") + cudaGetErrorName(e));
      });
      return cudaSuccess;
    }
  }
  const cudaError_t e = work();
  return e == cudaSuccess ? e : fail(e);
}

namespace dark::cuda_emu {
std::uint64_t copies_to_host() { return to_host_copies; }
std::uint64_t graph_launches() { return launched_graphs; }

namespace {
std::atomic<int> registers_per_thread{kDefaultFunctionRegisters};
}  // namespace
void set_function_registers(int count) { registers_per_thread = count; }
int function_registers() { return registers_per_thread; }

namespace {
std::vector<void (*)()>& installers() {  // filled at load time, before any install() call
  static std::vector<void (*)()> list;
  return list;
}
}  // namespace

void on_install(void (*replace_entry)()) { installers().push_back(replace_entry); }

void install() {
  static const bool installed = [] {
    for (void (*replace_entry)() : installers()) replace_entry();
    return true;
  }();
  (void)installed;
}

bool active() { return std::string_view(backend_name(DeviceType::cuda)) == kBackendName; }
void set_memory_capacity(std::size_t bytes) { set_device_capacity(bytes); }
std::size_t memory_capacity() { return device_capacity(); }
}  // namespace dark::cuda_emu

cudaError_t cudaGetDeviceCount(int* count) {
  *count = kDevices;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= kDevices) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= kDevices) return fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof *prop);
  std::strncpy(prop->name, "darkformer CUDA emulator (CPU)", sizeof prop->name - 1);
  prop->totalGlobalMem = dark::cuda_emu::device_capacity();
  prop->sharedMemPerBlock = dark::cuda_emu::kDefaultSharedLimit;
  prop->sharedMemPerBlockOptin = dark::cuda_emu::kMaxSharedOptin;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->major = compute_capability() / 10;
  prop->minor = compute_capability() % 10;
  prop->multiProcessorCount = multiprocessors();
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(p.sharedMemPerBlock); break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(p.sharedMemPerBlockOptin); break;
    default: return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* version) {
  *version = 13000;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = 13000;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  DARK_EMU_RETURN_IF_BROKEN();
  *ptr = dark::cuda_emu::device_malloc(bytes);
  return *ptr ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t cudaFree(void* ptr) {
  DARK_EMU_RETURN_IF_BROKEN();
  if (capturing()) return refuse_in_capture(cudaErrorStreamCaptureUnsupported);  // it synchronises the device
  if (ptr && !is_device_pointer(ptr)) return fail(cudaErrorInvalidDevicePointer);
  dark::cuda_emu::device_free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, std::size_t bytes) {
  DARK_EMU_RETURN_IF_BROKEN();
  *ptr = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  return *ptr ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t cudaHostAlloc(void** ptr, std::size_t bytes, unsigned) { return cudaMallocHost(ptr, bytes); }
cudaError_t cudaHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned flags) {
  DARK_EMU_RETURN_IF_BROKEN();
  if (device_ptr == nullptr || host_ptr == nullptr || flags != 0) return fail(cudaErrorInvalidValue);
  *device_ptr = host_ptr;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
  DARK_EMU_RETURN_IF_BROKEN();
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  DARK_EMU_RETURN_IF_BROKEN();
  *free_bytes = dark::cuda_emu::device_free_bytes();
  *total_bytes = dark::cuda_emu::device_capacity();
  return cudaSuccess;
}

namespace {
cudaError_t copy_now(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  if (!valid_kind(dst, src, kind)) return fail(cudaErrorInvalidMemcpyDirection);
  DeviceAccess access;
  std::memcpy(dst, src, bytes);
  if (!is_device_pointer(dst) && is_device_pointer(src)) ++to_host_copies;
  return cudaSuccess;
}
cudaError_t memset_now(void* ptr, int value, std::size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  if (!is_device_pointer(ptr)) return fail(cudaErrorInvalidValue);
  DeviceAccess access;
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}
}  // namespace

// The synchronous forms run on the legacy stream.
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  DARK_EMU_RETURN_IF_BROKEN();
  if (capturing()) return refuse_in_capture(cudaErrorStreamCaptureImplicit);
  return copy_now(dst, src, bytes, kind);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  DARK_EMU_RETURN_IF_BROKEN();
  if (!valid_kind(dst, src, kind)) return fail(cudaErrorInvalidMemcpyDirection);
  return dark::cuda_emu::run_or_record(stream, [=] { return copy_now(dst, src, bytes, kind); });
}
cudaError_t cudaMemcpyPeer(void* dst, int, const void* src, int, std::size_t bytes) {
  return cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice);
}
cudaError_t cudaMemset(void* ptr, int value, std::size_t bytes) {
  DARK_EMU_RETURN_IF_BROKEN();
  if (capturing()) return refuse_in_capture(cudaErrorStreamCaptureImplicit);
  return memset_now(ptr, value, bytes);
}
cudaError_t cudaMemsetAsync(void* ptr, int value, std::size_t bytes, cudaStream_t stream) {
  DARK_EMU_RETURN_IF_BROKEN();
  if (bytes != 0 && !is_device_pointer(ptr)) return fail(cudaErrorInvalidValue);
  return dark::cuda_emu::run_or_record(stream, [=] { return memset_now(ptr, value, bytes); });
}

cudaError_t cudaDeviceSynchronize() {
  DARK_EMU_RETURN_IF_BROKEN();
  return capturing() ? refuse_in_capture(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  DARK_EMU_RETURN_IF_BROKEN();
  *stream = reinterpret_cast<cudaStream_t>(new Stream);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) { return cudaStreamCreate(stream); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  DARK_EMU_RETURN_IF_BROKEN();
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return fail(cudaErrorInvalidResourceHandle);
  delete reinterpret_cast<Stream*>(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  DARK_EMU_RETURN_IF_BROKEN();
  return capturing() ? refuse_in_capture(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t event, unsigned) {
  DARK_EMU_RETURN_IF_BROKEN();
  return event ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  DARK_EMU_RETURN_IF_BROKEN();
  auto* e = new Event;
  e->timing = (flags & cudaEventDisableTiming) == 0;
  *event = reinterpret_cast<cudaEvent_t>(e);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  DARK_EMU_RETURN_IF_BROKEN();
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  delete reinterpret_cast<Event*>(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  DARK_EMU_RETURN_IF_BROKEN();
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  return dark::cuda_emu::run_or_record(stream, [event] {
    reinterpret_cast<Event*>(event)->at = std::chrono::steady_clock::now();
    return cudaSuccess;
  });
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  DARK_EMU_RETURN_IF_BROKEN();
  if (is_legacy(stream)) return fail(cudaErrorStreamCaptureUnsupported);  // the legacy stream cannot be captured
  std::lock_guard lock(capture_mutex);
  if (capture.stream != nullptr) return fail(cudaErrorStreamCaptureUnsupported);  // one at a time here
  capture = Capture{stream, false, {}};
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  DARK_EMU_RETURN_IF_BROKEN();
  std::lock_guard lock(capture_mutex);
  *graph = nullptr;
  if (capture.stream == nullptr || capture.stream != stream) return fail(cudaErrorInvalidValue);
  const bool invalidated = capture.invalidated;
  Nodes nodes = std::move(capture.nodes);
  capture = Capture{};
  if (invalidated) return fail(cudaErrorStreamCaptureInvalidated);
  *graph = reinterpret_cast<cudaGraph_t>(new Graph{std::move(nodes)});
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  DARK_EMU_RETURN_IF_BROKEN();
  if (!graph) return fail(cudaErrorInvalidResourceHandle);
  *exec = reinterpret_cast<cudaGraphExec_t>(new GraphExec{reinterpret_cast<Graph*>(graph)->nodes});
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  DARK_EMU_RETURN_IF_BROKEN();
  if (!exec) return fail(cudaErrorInvalidResourceHandle);
  const Nodes* nodes = &reinterpret_cast<GraphExec*>(exec)->nodes;
  return dark::cuda_emu::run_or_record(stream, [nodes] {
    ++launched_graphs;
    for (const auto& node : *nodes) node();
    return cudaSuccess;
  });
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  DARK_EMU_RETURN_IF_BROKEN();
  if (!graph) return fail(cudaErrorInvalidResourceHandle);
  delete reinterpret_cast<Graph*>(graph);
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  DARK_EMU_RETURN_IF_BROKEN();
  if (!exec) return fail(cudaErrorInvalidResourceHandle);
  delete reinterpret_cast<GraphExec*>(exec);
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  DARK_EMU_RETURN_IF_BROKEN();
  return event ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  DARK_EMU_RETURN_IF_BROKEN();
  return event ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  DARK_EMU_RETURN_IF_BROKEN();
  const auto* s = reinterpret_cast<Event*>(start);
  const auto* e = reinterpret_cast<Event*>(end);
  if (!s || !e || !s->timing || !e->timing) return fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(e->at - s->at).count();
  return cudaSuccess;
}

// A sticky error (a trapped kernel) is never cleared.
cudaError_t cudaGetLastError() {
  if (dark::cuda_emu::context_broken()) return cudaErrorLaunchFailure;
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return dark::cuda_emu::context_broken() ? cudaErrorLaunchFailure : last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorCudartUnloading: return "cudaErrorCudartUnloading";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorContextIsDestroyed: return "cudaErrorContextIsDestroyed";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorInvalidPc: return "cudaErrorInvalidPc";
    case cudaErrorInvalidAddressSpace: return "cudaErrorInvalidAddressSpace";
    case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
    case cudaErrorIllegalInstruction: return "cudaErrorIllegalInstruction";
    case cudaErrorHardwareStackError: return "cudaErrorHardwareStackError";
    case cudaErrorAssert: return "cudaErrorAssert";
    case cudaErrorLaunchTimeout: return "cudaErrorLaunchTimeout";
    case cudaErrorECCUncorrectable: return "cudaErrorECCUncorrectable";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    default: return cudaGetErrorName(error);
  }
}
