// Caching allocator: one per device. Blocks freed by tensors go to per-size free lists
// and are handed out again, so a training loop that repeats the same shapes performs no
// system allocation after its first step. Sizes are rounded up (512 B granularity below
// 1 MiB, then to 1/8 of the next power of two) so nearby sizes share blocks.
#pragma once
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/device.h"

namespace dark {

struct AllocatorStats {
  std::size_t bytes_in_use = 0;     // held by live tensors
  std::size_t bytes_cached = 0;     // free blocks kept for reuse
  std::size_t peak_bytes_in_use = 0;
  std::size_t system_allocs = 0;    // calls that reached the system allocator
  std::size_t requests = 0;         // allocate() calls
};

// What the caching layer needs from a device: raw allocation and release.
struct RawAllocator {
  void* (*allocate)(std::size_t bytes, int device_index);
  void (*release)(void* ptr, int device_index);
};

class CachingAllocator {
 public:
  CachingAllocator(RawAllocator raw, DeviceType device_type, int device_index)
      : raw_(raw), device_type_(device_type), device_index_(device_index) {}
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Returns a block of at least `bytes` (64-byte aligned on the CPU); 0 bytes gives nullptr.
  // When the device is full it returns its cache to the system and tries once more, then
  // throws OutOfMemory naming the size asked, the device's free and total memory and what
  // live tensors hold.
  void* allocate(std::size_t bytes);
  void release(void* ptr, std::size_t bytes);
  // Returns every cached block to the system (e.g. before measuring peak memory).
  void empty_cache();
  AllocatorStats stats() const;
  // Starts a new peak: peak_bytes_in_use becomes what is in use now (the trainer measures
  // each step's peak).
  void reset_peak();

  static std::size_t round_size(std::size_t bytes);

 private:
  std::string out_of_memory_message(std::size_t size) const;

  RawAllocator raw_;
  DeviceType device_type_;
  int device_index_;
  mutable std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_blocks_;  // rounded size -> blocks
  AllocatorStats stats_;
};

// The allocator of a device (created on first use).
CachingAllocator& allocator_for(Device device);

// Hands the host allocator's cached blocks and the C library's free heap pages back to the
// system: after a one-off phase (loading a model to finetune) whose block sizes the steady
// state will not reuse, so they do not stay in the resident set for the whole run.
void release_cached_host_memory();

}  // namespace dark
