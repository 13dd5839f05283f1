// CPU kernels that move or convert data: fill, strided copy (any layouts, any dtype of
// equal size) and dtype casts (float -> integer saturates, as on CUDA).
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/cpu/parallel.h"
#include "core/cpu/strided.h"
#include "core/kernels.h"
#include "core/saturating_cast.h"

namespace dark::cpu {
namespace {

// Converts between element types (exact for every pair we hold except i64 beyond 2^53,
// which a float tensor could not hold anyway); bf16 goes through float and rounds to
// nearest even; floats become integers by saturating_cast (NaN -> 0, out of range clamps).
template <class To, class From>
To convert(From v) {
  if constexpr (std::is_same_v<To, From>) return v;
  else if constexpr (std::is_same_v<To, BFloat16>) return BFloat16(static_cast<float>(v));
  else if constexpr (std::is_same_v<From, BFloat16>) return convert<To>(static_cast<float>(v));
  else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) return saturating_cast<To>(v);
  else return static_cast<To>(v);
}

template <class T>
void fill_kernel(Tensor& out, double value) {
  T* p = out.data<T>();
  const T v = convert<T>(value);
  parallel_for(out.numel(), kGrainCheap, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) p[i] = v;
  });
}

// Copies by element size: the bits move unchanged, so one kernel serves dtypes of equal size.
template <class Bits>
void strided_copy_kernel(const Tensor& src, Tensor& dst) {
  const Bits* ps = static_cast<const Bits*>(src.raw_data());
  Bits* pd = static_cast<Bits*>(dst.raw_data());
  if (src.is_contiguous() && dst.is_contiguous()) {
    if (ps != pd) std::memcpy(pd, ps, src.numel() * sizeof(Bits));
    return;
  }
  for_each_row<2>(dst.shape(), {&src.strides(), &dst.strides()}, kGrainCheap,
                  [&](const auto& off, std::int64_t n, const auto& inner) {
                    for (std::int64_t i = 0; i < n; ++i) pd[off[1] + i * inner[1]] = ps[off[0] + i * inner[0]];
                  });
}

template <class From, class To>
void cast_to(const Tensor& src, Tensor& dst) {
  const From* ps = static_cast<const From*>(src.raw_data());
  To* pd = static_cast<To*>(dst.raw_data());
  parallel_for(src.numel(), kGrainCheap, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) pd[i] = convert<To>(ps[i]);
  });
}

template <class From>
void cast_kernel(const Tensor& src, Tensor& dst) {
  switch (dst.dtype()) {
    case DType::f32: return cast_to<From, float>(src, dst);
    case DType::f64: return cast_to<From, double>(src, dst);
    case DType::bf16: return cast_to<From, BFloat16>(src, dst);
    case DType::i32: return cast_to<From, std::int32_t>(src, dst);
    case DType::i64: return cast_to<From, std::int64_t>(src, dst);
  }
}

DARK_REGISTER_KERNEL(fill, cpu, f32, fill_kernel<float>);
DARK_REGISTER_KERNEL(fill, cpu, f64, fill_kernel<double>);
DARK_REGISTER_KERNEL(fill, cpu, bf16, fill_kernel<BFloat16>);
DARK_REGISTER_KERNEL(fill, cpu, i32, fill_kernel<std::int32_t>);
DARK_REGISTER_KERNEL(fill, cpu, i64, fill_kernel<std::int64_t>);
DARK_REGISTER_KERNEL(strided_copy, cpu, f32, strided_copy_kernel<std::uint32_t>);
DARK_REGISTER_KERNEL(strided_copy, cpu, f64, strided_copy_kernel<std::uint64_t>);
DARK_REGISTER_KERNEL(strided_copy, cpu, bf16, strided_copy_kernel<std::uint16_t>);
DARK_REGISTER_KERNEL(strided_copy, cpu, i32, strided_copy_kernel<std::uint32_t>);
DARK_REGISTER_KERNEL(strided_copy, cpu, i64, strided_copy_kernel<std::uint64_t>);
DARK_REGISTER_KERNEL(cast, cpu, f32, cast_kernel<float>);
DARK_REGISTER_KERNEL(cast, cpu, f64, cast_kernel<double>);
DARK_REGISTER_KERNEL(cast, cpu, bf16, cast_kernel<BFloat16>);
DARK_REGISTER_KERNEL(cast, cpu, i32, cast_kernel<std::int32_t>);
DARK_REGISTER_KERNEL(cast, cpu, i64, cast_kernel<std::int64_t>);

}  // namespace
}  // namespace dark::cpu
