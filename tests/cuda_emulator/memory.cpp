// Device memory of the CUDA emulator (see memory.h): a first-fit allocator over a reserved
// range, whose used part is made accessible only inside DeviceAccess scopes.
#include "cuda_emulator/memory.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

namespace dark::cuda_emu {
namespace {

constexpr std::size_t kAlignment = 256;                    // cudaMalloc's guarantee
constexpr std::size_t kReserved = std::size_t{64} << 30;   // address space, not memory
constexpr std::size_t kPage = 4096;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

std::size_t capacity_from_environment() {
  if (const char* mb = std::getenv("DARK_CUDA_EMULATOR_MEMORY_MB")) return std::stoull(mb) << 20;
  return std::size_t{16} << 30;
}

struct Arena {
  char* base = nullptr;
  std::size_t capacity = capacity_from_environment();
  std::size_t used = 0;        // bytes held by live allocations
  std::size_t high_water = 0;  // end of the highest allocation ever made (page-rounded)
  std::map<std::size_t, std::size_t> free_ranges;  // offset -> size, below high_water
  std::map<std::size_t, std::size_t> live;         // offset -> size
  int access_depth = 0;

  Arena() {
    void* p = mmap(nullptr, kReserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "darkformer CUDA emulator: cannot reserve %zu bytes of address space\n", kReserved);
      std::abort();
    }
    base = static_cast<char*>(p);
  }
  void protect(int prot) {
    if (high_water > 0) mprotect(base, high_water, prot);
  }
};

Arena& arena() {
  static Arena a;
  return a;
}

}  // namespace

std::recursive_mutex& device_mutex() {
  static std::recursive_mutex m;
  return m;
}

DeviceAccess::DeviceAccess() : lock_(device_mutex()) {
  Arena& a = arena();
  if (a.access_depth++ == 0) a.protect(PROT_READ | PROT_WRITE);
}

DeviceAccess::~DeviceAccess() {
  Arena& a = arena();
  if (--a.access_depth == 0) a.protect(PROT_NONE);
}

void* device_malloc(std::size_t bytes) {
  std::lock_guard lock(device_mutex());
  Arena& a = arena();
  const std::size_t size = round_up(bytes == 0 ? 1 : bytes, kAlignment);
  if (a.used + size > a.capacity) return nullptr;
  std::size_t offset = a.high_water;
  for (auto it = a.free_ranges.begin(); it != a.free_ranges.end(); ++it)
    if (it->second >= size) {
      offset = it->first;
      if (it->second > size) a.free_ranges[offset + size] = it->second - size;
      a.free_ranges.erase(it);
      break;
    }
  if (offset == a.high_water) {
    const std::size_t end = round_up(offset + size, kPage);
    if (end > kReserved) return nullptr;
    if (a.access_depth > 0) mprotect(a.base + a.high_water, end - a.high_water, PROT_READ | PROT_WRITE);
    if (end - (offset + size) > 0) a.free_ranges[offset + size] = end - (offset + size);
    a.high_water = end;
  }
  a.live[offset] = size;
  a.used += size;
  return a.base + offset;
}

void device_free(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(device_mutex());
  Arena& a = arena();
  const std::size_t offset = static_cast<std::size_t>(static_cast<char*>(ptr) - a.base);
  const auto it = a.live.find(offset);
  if (it == a.live.end()) {
    std::fprintf(stderr, "darkformer CUDA emulator: cudaFree of %p, which cudaMalloc did not return\n", ptr);
    std::abort();
  }
  std::size_t begin = offset, size = it->second;
  a.used -= size;
  a.live.erase(it);
  // Merge with the free neighbours.
  auto next = a.free_ranges.lower_bound(begin);
  if (next != a.free_ranges.end() && next->first == begin + size) {
    size += next->second;
    next = a.free_ranges.erase(next);
  }
  if (next != a.free_ranges.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == begin) {
      begin = prev->first;
      size += prev->second;
      a.free_ranges.erase(prev);
    }
  }
  // Whole pages of a large free range go back to the system (their contents are dropped).
  const std::size_t page_begin = round_up(begin, kPage), page_end = (begin + size) / kPage * kPage;
  if (page_end > page_begin + (std::size_t{1} << 20)) madvise(a.base + page_begin, page_end - page_begin, MADV_DONTNEED);
  a.free_ranges[begin] = size;
}

bool is_device_pointer(const void* ptr) {
  const Arena& a = arena();
  const char* p = static_cast<const char*>(ptr);
  return p >= a.base && p < a.base + kReserved;
}

std::size_t device_capacity() { return arena().capacity; }

std::size_t device_free_bytes() {
  std::lock_guard lock(device_mutex());
  const Arena& a = arena();
  return a.capacity > a.used ? a.capacity - a.used : 0;
}

void set_device_capacity(std::size_t bytes) {
  std::lock_guard lock(device_mutex());
  arena().capacity = bytes;
}

}  // namespace dark::cuda_emu
