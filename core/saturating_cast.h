// Floating-point to integer conversion defined for every input, shared by the CPU and CUDA
// cast kernels so both devices give the same integers. A plain static_cast is undefined
// behaviour for NaN and for values outside the integer's range; this follows Rust's `as`:
// truncation toward zero, NaN -> 0, values beyond the range (and +-inf) saturate to the
// integer's min / max.
#pragma once
#include <limits>
#include <type_traits>

#include "core/host_device.h"

namespace dark {

template <class I, class F>
DARK_HOST_DEVICE I saturating_cast(F v) {
  static_assert(std::is_integral_v<I> && std::is_signed_v<I> && std::is_floating_point_v<F>);
  // -2^(bits-1) and 2^(bits-1) are powers of two, exact in F; every F strictly between them
  // truncates to a value of I.
  constexpr F lowest = static_cast<F>(std::numeric_limits<I>::min());
  constexpr F beyond_max = -lowest;
  if (v != v) return I(0);  // NaN
  if (v <= lowest) return std::numeric_limits<I>::min();
  if (v >= beyond_max) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

}  // namespace dark
