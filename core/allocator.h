// Caching allocator: one per device. Blocks freed by tensors go to per-size free lists
// and are handed out again, so a training loop that repeats the same shapes performs no
// system allocation after its first step. Sizes are rounded up (512 B granularity below
// 1 MiB, then to 1/8 of the next power of two) so nearby sizes share blocks.
#pragma once
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
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

  // Private pools of captured graphs (core/device_graph.h). A graph's launches use again the
  // addresses its capture used, so from begin_pool() to end_pool() every block handed out
  // comes from the new pool or joins it, every block released joins it, and the pool's
  // blocks are never handed out to anyone else until release_pool() (its graph destroyed)
  // hands them back to the common cache. A capture allocates from the cache and never
  // returns memory to the system (out of memory then throws). One pool captures at a time.
  int begin_pool();
  void end_pool();
  void release_pool(int pool);
  // The blocks a pool owns (held by live tensors or free for its graph's next launch).
  std::size_t pool_bytes(int pool) const;
  // Whether `ptr` is a block of the pool capturing now.
  bool in_capturing_pool(const void* ptr) const;

 private:
  std::string out_of_memory_message(std::size_t size) const;
  // Takes a cached block of `size` bytes (the capturing pool's, else the common cache's);
  // nullptr when there is none. The caller holds mutex_.
  void* take_cached(std::size_t size);

  struct Pool {
    std::map<std::size_t, std::vector<void*>> free_blocks;
    std::size_t bytes = 0;  // of every block it owns
  };

  RawAllocator raw_;
  DeviceType device_type_;
  int device_index_;
  mutable std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_blocks_;  // rounded size -> blocks (the common cache)
  AllocatorStats stats_;
  std::map<int, Pool> pools_;
  std::unordered_map<void*, int> pool_of_;  // block -> the pool that owns it
  int capturing_ = 0;                       // the pool capturing now; 0: none
  int next_pool_ = 1;
};

// The allocator of a device (created on first use).
CachingAllocator& allocator_for(Device device);

// Hands the host allocator's cached blocks and the C library's free heap pages back to the
// system: after a one-off phase (loading a model to finetune) whose block sizes the steady
// state will not reuse, so they do not stay in the resident set for the whole run.
void release_cached_host_memory();

}  // namespace dark
