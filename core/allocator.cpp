// Caching allocator implementation (see allocator.h) and the per-device registry.
#include "core/allocator.h"

#include <malloc.h>

#include <algorithm>
#include <array>
#include <memory>

#include "core/backend.h"
#include "core/error.h"

namespace dark {

std::size_t CachingAllocator::round_size(std::size_t bytes) {
  constexpr std::size_t kSmall = 512, kLarge = std::size_t{1} << 20;
  if (bytes <= kLarge) return (bytes + kSmall - 1) / kSmall * kSmall;
  // Above 1 MiB: round up to an eighth of the next power of two (<= 12.5% waste).
  std::size_t power = kLarge;
  while (power < bytes) power <<= 1;
  const std::size_t step = power / 8;
  return (bytes + step - 1) / step * step;
}

CachingAllocator::~CachingAllocator() { empty_cache(); }

std::string CachingAllocator::out_of_memory_message(std::size_t size) const {
  constexpr double kMiB = 1024.0 * 1024.0;
  const AllocatorStats s = stats();
  const Device device{device_type_, device_index_};
  std::string message = str(device.to_string(), ": out of memory: asked for ", size / kMiB, " MiB");
  const auto [free_bytes, total_bytes] = backend_for(device_type_).memory_info(device_index_);
  if (total_bytes > 0) message += str("; ", free_bytes / kMiB, " MiB free of ", total_bytes / kMiB, " MiB");
  return message + str("; live tensors hold ", s.bytes_in_use / kMiB, " MiB (peak ", s.peak_bytes_in_use / kMiB, " MiB)");
}

void* CachingAllocator::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  const std::size_t size = round_size(bytes);
  {
    std::lock_guard lock(mutex_);
    ++stats_.requests;
    auto it = free_blocks_.find(size);
    if (it != free_blocks_.end() && !it->second.empty()) {
      void* ptr = it->second.back();
      it->second.pop_back();
      stats_.bytes_cached -= size;
      stats_.bytes_in_use += size;
      stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
      return ptr;
    }
  }
  void* ptr = raw_.allocate(size, device_index_);
  if (ptr == nullptr) {
    // Out of memory: give the cache back to the system and try once more.
    empty_cache();
    ptr = raw_.allocate(size, device_index_);
  }
  if (ptr == nullptr) throw OutOfMemory(out_of_memory_message(size));
  std::lock_guard lock(mutex_);
  ++stats_.system_allocs;
  stats_.bytes_in_use += size;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return ptr;
}

void CachingAllocator::release(void* ptr, std::size_t bytes) {
  if (ptr == nullptr) return;
  const std::size_t size = round_size(bytes);
  std::lock_guard lock(mutex_);
  free_blocks_[size].push_back(ptr);
  stats_.bytes_in_use -= size;
  stats_.bytes_cached += size;
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  for (auto& [size, blocks] : free_blocks_)
    for (void* p : blocks) raw_.release(p, device_index_);
  free_blocks_.clear();
  stats_.bytes_cached = 0;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

CachingAllocator& allocator_for(Device device) {
  constexpr int kMaxDevices = 16;
  // Leaked on purpose: tensors in static objects may be released after main returns.
  static auto* allocators = new std::array<std::array<std::unique_ptr<CachingAllocator>, kMaxDevices>, kNumDeviceTypes>();
  static std::mutex mutex;
  DARK_CHECK(device.index >= 0 && device.index < kMaxDevices, "device index ", device.index,
             " out of range");
  std::lock_guard lock(mutex);
  auto& slot = (*allocators)[static_cast<int>(device.type)][device.index];
  if (!slot) slot = std::make_unique<CachingAllocator>(backend_for(device.type).raw_allocator(), device.type, device.index);
  return *slot;
}

void release_cached_host_memory() {
  allocator_for(Device::cpu()).empty_cache();
  ::malloc_trim(0);
}

}  // namespace dark
