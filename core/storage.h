// A block of device memory shared by a tensor and its views; returned to the device's
// caching allocator when the last owner goes away.
#pragma once
#include <cstddef>

#include "core/allocator.h"
#include "core/device.h"

namespace dark {

class Storage {
 public:
  Storage(std::size_t bytes, Device device)
      : data_(allocator_for(device).allocate(bytes)), bytes_(bytes), device_(device) {}
  ~Storage() { allocator_for(device_).release(data_, bytes_); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  std::size_t bytes_;
  Device device_;
};

}  // namespace dark
