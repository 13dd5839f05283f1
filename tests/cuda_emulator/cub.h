// The CUB subset the CUDA backend uses (core/cuda/index.cu), for the CUDA emulator:
// BlockScan's inclusive sum over a block's items and DeviceRadixSort's stable pair sort.
// Same results and stability contract; the scan adds in another (fixed) order.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "cuda_emulator/memory.h"
#include "cuda_emulator/runtime.h"

namespace cub {

template <class T, int kBlockThreads>
class BlockScan {
 public:
  struct TempStorage {
    T totals[kBlockThreads];
  };
  explicit BlockScan(TempStorage& storage) : storage_(storage) {}

  // out = inclusive prefix sums of the block's items in thread order; aggregate = their total.
  template <int kItems>
  void InclusiveSum(T (&in)[kItems], T (&out)[kItems], T& aggregate) {
    T running = T(0);
    for (int i = 0; i < kItems; ++i) out[i] = running = running + in[i];
    const int me = static_cast<int>(threadIdx.x);
    storage_.totals[me] = running;
    __syncthreads();
    T before = T(0), total = T(0);
    for (int t = 0; t < kBlockThreads; ++t) {
      if (t == me) before = total;
      total = total + storage_.totals[t];
    }
    aggregate = total;
    __syncthreads();
    for (int i = 0; i < kItems; ++i) out[i] = before + out[i];
  }

 private:
  TempStorage& storage_;
};

struct DeviceRadixSort {
  // Sorts (key, value) pairs by bits [begin_bit, end_bit) of the keys, stably.
  template <class K, class V, class N>
  static cudaError_t SortPairs(void* temp, std::size_t& temp_bytes, const K* keys_in, K* keys_out, const V* values_in,
                               V* values_out, N num_items, int begin_bit = 0, int end_bit = sizeof(K) * 8,
                               cudaStream_t stream = nullptr) {
    if (temp == nullptr) {
      temp_bytes = 16;
      return cudaSuccess;
    }
    return dark::cuda_emu::run_or_record(stream, [=] {
      dark::cuda_emu::DeviceAccess access;
      const std::size_t n = static_cast<std::size_t>(num_items);
      const int bits = end_bit - begin_bit;
      const auto key_bits = [&](K k) {
        const auto u = static_cast<std::uint64_t>(k) >> begin_bit;
        return bits >= 64 ? u : (u & ((std::uint64_t{1} << bits) - 1));
      };
      std::vector<std::size_t> order(n);
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::stable_sort(order.begin(), order.end(),
                       [&](std::size_t a, std::size_t b) { return key_bits(keys_in[a]) < key_bits(keys_in[b]); });
      std::vector<K> keys(n);
      std::vector<V> values(n);
      for (std::size_t i = 0; i < n; ++i) keys[i] = keys_in[order[i]], values[i] = values_in[order[i]];
      std::copy(keys.begin(), keys.end(), keys_out);
      std::copy(values.begin(), values.end(), values_out);
      return cudaSuccess;
    });
  }
};

}  // namespace cub
