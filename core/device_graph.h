// Graphs of device work: the kernels, copies and products a piece of host code queues on one
// CUDA device, recorded once and launched again as one unit, which costs one launch instead of
// one per kernel. What the code computes on the host (shapes, which kernels, their scalar
// arguments, the addresses of the tensors) is fixed at capture: a launch repeats the recorded
// work on the same memory, so inputs change by writing new values into the tensors the
// capture read (Tensor::copy_), and outputs are the tensors the capture wrote.
//
// The memory the captured work allocates or frees belongs to the graph (CachingAllocator's
// pools): nothing else is handed those blocks while the graph lives, since each launch uses
// them again. Tensors made before the capture that its kernels use are kept alive by the
// graph (core/dispatch.h), so their memory cannot be freed under it either. The capture
// itself runs no kernel, so it cannot copy from or to the host, wait for the device, or read
// a device value; doing so is an error naming the call. Work that fills caches (first-use
// allocations, cuBLAS's set-up) should run once eagerly before.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/dispatch.h"

namespace dark {

class Storage;

class DeviceGraph {
 public:
  // Captures what `work` queues on `device` (a CUDA device). On any error the capture is
  // abandoned, its memory returned, and the error rethrown.
  DeviceGraph(Device device, const std::function<void()>& work);
  ~DeviceGraph();
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;

  // Queues the recorded work after the work already queued on the device (the host does
  // not wait).
  void launch() const;
  // The memory the graph's pool owns (its intermediate tensors, reused by every launch).
  std::size_t pool_bytes() const;
  Device device() const { return device_; }

 private:
  friend void capture_detail::keep(const Tensor& t);

  Device device_;
  int pool_ = 0;
  void* graph_ = nullptr;
  std::vector<std::shared_ptr<Storage>> kept_;  // tensors from before the capture that its kernels use
};

}  // namespace dark
