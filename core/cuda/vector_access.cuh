// Elementwise loops over contiguous operands that move 16 bytes per memory access: a GPU
// reaches its memory bandwidth only with wide accesses (a bf16 element alone is a 2-byte
// load), so each thread of the grid-stride loop loads a pack of consecutive elements of every
// input with 16-byte loads, applies the per-element function to each element in registers
// and stores the outputs' packs. The function and its order of operations per element are
// the scalar loop's, so results are the same bits; only the access width changes.
//
// A pack holds W elements, 16 bytes of the narrowest operand (8 bf16, 4 f32, 2 f64; a cast
// f32 -> bf16 moves 8 elements: two 16-byte loads, one 16-byte store). Packs start where every
// operand is 16-byte aligned; the elements before (the head) and after the last whole pack
// (the tail) go one at a time. Operands whose addresses no one head can align (views at
// different offsets) take the scalar loop throughout.
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cuda/launch.cuh"

namespace dark::cuda {

inline constexpr int kAccessBytes = 16;  // widest global load / store of one thread

// Elements per pack of a loop over operands of types Ts.
template <class... Ts>
inline constexpr int kPackWidth = kAccessBytes / static_cast<int>(std::min({sizeof(Ts)...}));

// W consecutive elements of one operand in registers, aligned so that a pack of 16 bytes or
// more moves in 16-byte accesses (a one-element pack is the element itself).
template <class T, int W>
struct alignas(W * sizeof(T) < kAccessBytes ? W * sizeof(T) : kAccessBytes) Pack {
  T v[W];
};

namespace vector_access_detail {

// Elements from p to its next 16-byte boundary (0 on one); whether p + i is on one.
template <class T>
__device__ __forceinline__ std::int64_t elements_to_boundary(T* p) {
  const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(p);
  return (kAccessBytes - address % kAccessBytes) % kAccessBytes / sizeof(T);
}
template <class T>
__device__ __forceinline__ bool aligned_at(T* p, std::int64_t i) {
  return (reinterpret_cast<std::uintptr_t>(p) + i * sizeof(T)) % kAccessBytes == 0;
}

// An input's pack (const T*) is read; an output's (T*) is f's to fill.
template <int W, class T>
__device__ __forceinline__ Pack<std::remove_const_t<T>, W> load_pack(T* p) {
  if constexpr (std::is_const_v<T>) return *reinterpret_cast<const Pack<std::remove_const_t<T>, W>*>(p);
  else return {};
}

template <int W, class T>
__device__ __forceinline__ void store_pack(T* p, const Pack<std::remove_const_t<T>, W>& pack) {
  if constexpr (!std::is_const_v<T>) *reinterpret_cast<Pack<T, W>*>(p) = pack;
}

// f on the W elements at i: every input is loaded before any output is stored, so an
// output may be an input (in place).
template <int W, class F, class... Ts>
__device__ __forceinline__ void apply_packs(const F& f, std::int64_t i, Ts*... p) {
  [&](auto... packs) {
#pragma unroll
    for (int j = 0; j < W; ++j) f(packs.v[j]...);
    (store_pack<W>(p + i, packs), ...);
  }(load_pack<W>(p + i)...);
}

}  // namespace vector_access_detail

// Over the grid, f(elements i of p...) for every i in [0, n): f takes the inputs' elements
// (const T* operands) by value and the outputs' (T* operands) by reference to assign.
template <class F, class... Ts>
__device__ __forceinline__ void for_each_contiguous(std::int64_t n, const F& f, Ts*... p) {
  using namespace vector_access_detail;
  constexpr int kWidth = kPackWidth<Ts...>;
  // Packs start at the first index where every operand is 16-byte aligned. If there is one, it
  // is the largest distance of an operand to its next boundary, provided that aligns the rest;
  // operands misaligned to one another (views at different offsets) all go element by element.
  std::int64_t head = 0;
  ((head = std::max(head, elements_to_boundary(p))), ...);
  head = (aligned_at(p, head) && ...) ? std::min(head, n) : n;
  const std::int64_t packs = (n - head) / kWidth, tail = head + packs * kWidth;
  const std::int64_t first = global_thread(), stride = grid_threads();
  // Not unrolled: an aligned head or tail, shorter than a pack, is at most one element per
  // thread, and unrolled copies cost the kernel registers, hence occupancy.
#pragma unroll 1
  for (std::int64_t i = first; i < head; i += stride) apply_packs<1>(f, i, p...);
  for (std::int64_t k = first; k < packs; k += stride) apply_packs<kWidth>(f, head + k * kWidth, p...);
#pragma unroll 1
  for (std::int64_t i = tail + first; i < n; i += stride) apply_packs<1>(f, i, p...);
}

// Blocks for for_each_contiguous over n elements of operands Ts: one thread per pack (without
// a common alignment, each thread then takes W elements in turn).
template <class... Ts>
unsigned grid_for_packs(std::int64_t n) {
  return grid_for((n + kPackWidth<Ts...> - 1) / kPackWidth<Ts...>);
}

}  // namespace dark::cuda
