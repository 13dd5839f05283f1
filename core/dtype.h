// Element types a Tensor can hold, with their sizes and printable names.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace dark {

enum class DType : std::uint8_t { f32 = 0, f64, bf16, i32, i64 };
inline constexpr int kNumDTypes = 5;

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::bf16; }

// The dtype gradients of a tensor of type t accumulate in: fp32 for bf16, itself otherwise.
constexpr DType grad_dtype(DType t) { return t == DType::bf16 ? DType::f32 : t; }

}  // namespace dark
