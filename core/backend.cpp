// Backend registry: the built-in CPU backend, and the CUDA slot that core/cuda/ fills at
// load time (once: see register_backend). Without the CUDA backend the slot holds a stub
// that reports no devices and fails clearly when used.
#include "core/backend.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace dark {
namespace {

class CpuBackend final : public DeviceBackend {
 public:
  RawAllocator raw_allocator() const override {
    return {[](std::size_t bytes, int) -> void* {
              // 64-byte alignment: a cache line and an AVX-512 register.
              return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
            },
            [](void* p, int) { std::free(p); }};
  }
  int device_count() const override { return 1; }
  void copy(void* dst, Device, const void* src, Device, std::size_t bytes) const override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void synchronize(int) const override {}
};

class MissingCudaBackend final : public DeviceBackend {
 public:
  [[noreturn]] static void fail() {
    throw Error("CUDA device requested, but darkformer was built without CUDA (DARK_USE_CUDA=OFF)");
  }
  RawAllocator raw_allocator() const override {
    return {[](std::size_t, int) -> void* { fail(); }, [](void*, int) { fail(); }};
  }
  int device_count() const override { return 0; }
  void copy(void*, Device, const void*, Device, std::size_t) const override { fail(); }
  void synchronize(int) const override { fail(); }
};

struct Registered {
  DeviceBackend* backend;
  const char* name;
};

constexpr const char* kMissingCudaName = "no CUDA backend (built with DARK_USE_CUDA=OFF)";

Registered& slot(DeviceType type) {
  static CpuBackend cpu;
  static MissingCudaBackend missing_cuda;
  static Registered backends[kNumDeviceTypes] = {{&cpu, "the built-in CPU backend"}, {&missing_cuda, kMissingCudaName}};
  return backends[static_cast<int>(type)];
}

}  // namespace

DeviceBackend& backend_for(DeviceType type) { return *slot(type).backend; }

void* DeviceBackend::record_timing_event() const { return new std::chrono::steady_clock::time_point(std::chrono::steady_clock::now()); }
double DeviceBackend::elapsed_ms(void* start, void* end) const {
  using Time = std::chrono::steady_clock::time_point;
  return std::chrono::duration<double, std::milli>(*static_cast<Time*>(end) - *static_cast<Time*>(start)).count();
}
void DeviceBackend::release_timing_event(void* event) const { delete static_cast<std::chrono::steady_clock::time_point*>(event); }

namespace {
[[noreturn]] void no_graphs() {
  throw Error(
      "device graphs need a CUDA device (the CPU runs each kernel as it is called: there is nothing to capture)");
}
}  // namespace
void DeviceBackend::begin_capture(int) const { no_graphs(); }
void* DeviceBackend::end_capture(int) const { no_graphs(); }
void DeviceBackend::launch_graph(void*, int) const { no_graphs(); }
void DeviceBackend::release_graph(void*) const {}

void register_backend(DeviceType type, DeviceBackend* backend, const char* name) {
  Registered& current = slot(type);
  DARK_CHECK(current.name == kMissingCudaName, "register_backend: ", device_type_name(type), " is already served by ",
             current.name, "; refusing to replace it with ", name,
             " (two libraries register this device: link only one)");
  current = {backend, name};
}

void replace_backend(DeviceType type, DeviceBackend* backend, const char* name) { slot(type) = {backend, name}; }

const char* backend_name(DeviceType type) { return slot(type).name; }
bool cuda_backend_built() { return slot(DeviceType::cuda).name != kMissingCudaName; }

int cuda_device_count() { return backend_for(DeviceType::cuda).device_count(); }
bool cuda_available() { return cuda_device_count() > 0; }

}  // namespace dark
