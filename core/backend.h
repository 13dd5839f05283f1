// What core needs from a device beyond kernels: raw memory, copies to and from the host,
// synchronisation and device discovery. The CPU backend is built in; the CUDA backend
// registers itself from core/cuda/, and without it (DARK_USE_CUDA=OFF) a stub answers
// "no device" to queries and fails clearly on use.
#pragma once
#include <cstddef>
#include <utility>

#include "core/allocator.h"
#include "core/device.h"

namespace dark {

struct DeviceBackend {
  virtual ~DeviceBackend() = default;
  // Its allocate returns nullptr when the device is out of memory (other failures throw).
  virtual RawAllocator raw_allocator() const = 0;
  // Number of usable devices; 0 when the runtime or driver is missing.
  virtual int device_count() const = 0;
  // Copies bytes between two devices of which at least one is of this backend's type.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    std::size_t bytes) const = 0;
  virtual void synchronize(int device_index) const = 0;
  // Free and total bytes of the device's memory, when the backend can tell (0, 0 otherwise).
  virtual std::pair<std::size_t, std::size_t> memory_info(int /*device_index*/) const { return {0, 0}; }
  // Kernel profiles (core/kernel_profile.h): a marker recorded in the order of the current
  // device's work, the milliseconds between two markers (waiting for the later one), and a
  // marker's release. This default is the host clock, exact for a device whose kernels
  // return when done (the CPU); the CUDA backend records CUDA events on its stream.
  virtual void* record_timing_event() const;
  virtual double elapsed_ms(void* start, void* end) const;
  virtual void release_timing_event(void* event) const;
  // Graphs (core/device_graph.h): from begin_capture to end_capture the calling thread's work
  // for the device is recorded, not run; end_capture returns the recorded graph, ready to
  // launch, or throws saying what broke the capture; launch_graph queues a graph after the
  // work already queued; release_graph frees it. These defaults throw: only CUDA captures.
  virtual void begin_capture(int device_index) const;
  virtual void* end_capture(int device_index) const;
  virtual void launch_graph(void* graph, int device_index) const;
  virtual void release_graph(void* graph) const;
};

DeviceBackend& backend_for(DeviceType type);
// Makes `backend` serve `type`; `name` says which it is in logs and errors ("the CUDA
// runtime"). A type registers once: a second registration throws, naming both, since two
// libraries each claiming a device would otherwise leave whichever loaded last in charge.
void register_backend(DeviceType type, DeviceBackend* backend, const char* name);
// Replaces whatever serves `type`, on purpose. Only the CUDA emulator does, when a test
// program installs it (tests/cuda_emulator/control.h).
void replace_backend(DeviceType type, DeviceBackend* backend, const char* name);
// The name of what serves `type`: "the built-in CPU backend", "the CUDA runtime", "no CUDA
// backend (built with DARK_USE_CUDA=OFF)", or the CUDA emulator's name.
const char* backend_name(DeviceType type);
// Whether a CUDA backend is registered at all (a build without one has only the stub).
bool cuda_backend_built();

// True when at least one CUDA device can run kernels. Reads "insufficient driver" and
// "no device" as false, so GPU tests skip cleanly on machines without a GPU.
bool cuda_available();
int cuda_device_count();

}  // namespace dark
