// Caching allocator implementation (see allocator.h) and the per-device registry.
#include "core/allocator.h"

#include <malloc.h>

#include <algorithm>
#include <array>
#include <iterator>
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

namespace {
void* pop(std::map<std::size_t, std::vector<void*>>& free_blocks, std::size_t size) {
  auto it = free_blocks.find(size);
  if (it == free_blocks.end() || it->second.empty()) return nullptr;
  void* ptr = it->second.back();
  it->second.pop_back();
  return ptr;
}
}  // namespace

void* CachingAllocator::take_cached(std::size_t size) {
  if (capturing_ == 0) return pop(free_blocks_, size);
  Pool& pool = pools_.at(capturing_);
  if (void* ptr = pop(pool.free_blocks, size)) return ptr;
  void* ptr = pop(free_blocks_, size);
  if (ptr) pool_of_[ptr] = capturing_, pool.bytes += size;  // the common cache's block joins the pool
  return ptr;
}

void* CachingAllocator::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  const std::size_t size = round_size(bytes);
  bool capturing = false;
  {
    std::lock_guard lock(mutex_);
    ++stats_.requests;
    if (void* ptr = take_cached(size)) {
      stats_.bytes_cached -= size;
      stats_.bytes_in_use += size;
      stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
      return ptr;
    }
    capturing = capturing_ != 0;
  }
  void* ptr = raw_.allocate(size, device_index_);
  if (ptr == nullptr && !capturing) {
    // Out of memory: give the cache back to the system and try once more (not while a graph
    // captures: freeing device memory would synchronise the device in the middle of it).
    empty_cache();
    ptr = raw_.allocate(size, device_index_);
  }
  if (ptr == nullptr)
    throw OutOfMemory(out_of_memory_message(size) +
                      (capturing ? " (while capturing a CUDA graph, which keeps its own memory: "
                                   "try without training.cuda_graph)"
                                 : ""));
  std::lock_guard lock(mutex_);
  ++stats_.system_allocs;
  stats_.bytes_in_use += size;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  if (capturing_ != 0) pool_of_[ptr] = capturing_, pools_.at(capturing_).bytes += size;
  return ptr;
}

void CachingAllocator::release(void* ptr, std::size_t bytes) {
  if (ptr == nullptr) return;
  const std::size_t size = round_size(bytes);
  std::lock_guard lock(mutex_);
  stats_.bytes_in_use -= size;
  stats_.bytes_cached += size;
  auto owner = pool_of_.find(ptr);
  if (owner == pool_of_.end() && capturing_ != 0) {  // released during a capture: the graph may use it again
    owner = pool_of_.emplace(ptr, capturing_).first;
    pools_.at(capturing_).bytes += size;
  }
  if (owner != pool_of_.end()) pools_.at(owner->second).free_blocks[size].push_back(ptr);
  else free_blocks_[size].push_back(ptr);
}

int CachingAllocator::begin_pool() {
  std::lock_guard lock(mutex_);
  DARK_CHECK(capturing_ == 0, Device{device_type_, device_index_}.to_string(),
             ": a graph capture is already under way (one at a time)");
  capturing_ = next_pool_++;
  pools_[capturing_];
  return capturing_;
}

void CachingAllocator::end_pool() {
  std::lock_guard lock(mutex_);
  capturing_ = 0;
}

void CachingAllocator::release_pool(int pool) {
  std::lock_guard lock(mutex_);
  auto it = pools_.find(pool);
  if (it == pools_.end()) return;
  if (capturing_ == pool) capturing_ = 0;
  for (auto& [size, blocks] : it->second.free_blocks)
    free_blocks_[size].insert(free_blocks_[size].end(), blocks.begin(), blocks.end());
  for (auto b = pool_of_.begin(); b != pool_of_.end();) b = b->second == pool ? pool_of_.erase(b) : std::next(b);
  pools_.erase(it);
}

bool CachingAllocator::in_capturing_pool(const void* ptr) const {
  std::lock_guard lock(mutex_);
  const auto it = pool_of_.find(const_cast<void*>(ptr));
  return capturing_ != 0 && it != pool_of_.end() && it->second == capturing_;
}

std::size_t CachingAllocator::pool_bytes(int pool) const {
  std::lock_guard lock(mutex_);
  const auto it = pools_.find(pool);
  return it == pools_.end() ? 0 : it->second.bytes;
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
