// GGUF tensor types and dequantisation: the table of ggml's tensor types (block size and
// bytes per block, see gguf.h) and the kernels that turn blocks of quantised tensor data
// into float32, bit for bit as ggml and gguf-py do. The file parsing lives in gguf.cpp.
#include "data/gguf.h"

#include <bit>
#include <cstring>
#include <string>

#include "core/cpu/parallel.h"
#include "core/error.h"
#include "data/gguf_bytes.h"

namespace dark::data {

// ============================================================================ tensor types

namespace {

struct TypeTraits {
  GgufType type;
  const char* name;
  std::int64_t block_size;
  std::int64_t type_bytes;
};

// Block sizes and bytes per block of ggml's types (the K-quants use 256-element super-blocks).
// Q8_1 is ggml's current layout (f16 d, f16 sum, 32 x i8); older gguf-py tables say 40 bytes.
constexpr TypeTraits kTypes[] = {
    {GgufType::F32, "F32", 1, 4},          {GgufType::F16, "F16", 1, 2},
    {GgufType::Q4_0, "Q4_0", 32, 18},      {GgufType::Q4_1, "Q4_1", 32, 20},
    {GgufType::Q5_0, "Q5_0", 32, 22},      {GgufType::Q5_1, "Q5_1", 32, 24},
    {GgufType::Q8_0, "Q8_0", 32, 34},      {GgufType::Q8_1, "Q8_1", 32, 36},
    {GgufType::Q2_K, "Q2_K", 256, 84},     {GgufType::Q3_K, "Q3_K", 256, 110},
    {GgufType::Q4_K, "Q4_K", 256, 144},    {GgufType::Q5_K, "Q5_K", 256, 176},
    {GgufType::Q6_K, "Q6_K", 256, 210},    {GgufType::Q8_K, "Q8_K", 256, 292},
    {GgufType::IQ2_XXS, "IQ2_XXS", 256, 66}, {GgufType::IQ2_XS, "IQ2_XS", 256, 74},
    {GgufType::IQ3_XXS, "IQ3_XXS", 256, 98}, {GgufType::IQ1_S, "IQ1_S", 256, 50},
    {GgufType::IQ4_NL, "IQ4_NL", 32, 18},  {GgufType::IQ3_S, "IQ3_S", 256, 110},
    {GgufType::IQ2_S, "IQ2_S", 256, 82},   {GgufType::IQ4_XS, "IQ4_XS", 256, 136},
    {GgufType::I8, "I8", 1, 1},            {GgufType::I16, "I16", 1, 2},
    {GgufType::I32, "I32", 1, 4},          {GgufType::I64, "I64", 1, 8},
    {GgufType::F64, "F64", 1, 8},          {GgufType::IQ1_M, "IQ1_M", 256, 56},
    {GgufType::BF16, "BF16", 1, 2},        {GgufType::TQ1_0, "TQ1_0", 256, 54},
    {GgufType::TQ2_0, "TQ2_0", 256, 66},   {GgufType::MXFP4, "MXFP4", 32, 17},
};

const TypeTraits* traits_of(GgufType t) {
  for (const auto& tr : kTypes)
    if (tr.type == t) return &tr;
  return nullptr;
}

const TypeTraits& known_traits(GgufType t) {
  const TypeTraits* tr = traits_of(t);
  DARK_CHECK(tr != nullptr, "gguf: unknown tensor type ", static_cast<std::uint32_t>(t));
  return *tr;
}

}  // namespace

std::string gguf_type_name(GgufType t) {
  const TypeTraits* tr = traits_of(t);
  return tr ? tr->name : str("type ", static_cast<std::uint32_t>(t));
}
bool gguf_type_known(GgufType t) { return traits_of(t) != nullptr; }
std::int64_t gguf_block_size(GgufType t) { return known_traits(t).block_size; }
std::int64_t gguf_type_bytes(GgufType t) { return known_traits(t).type_bytes; }

// ============================================================================ dequantisation
//
// Each kernel turns one block of raw bytes into block_size floats. The arithmetic mirrors
// the format's definition step by step in float32 (scale products first, then q * scale,
// then the minimum), so results match ggml and gguf-py bit for bit; the build keeps
// -ffp-contract off (ISO C++ mode), so no fused multiply-add changes the rounding.

namespace {

using detail::load_u16;
using detail::load_u32;

// IEEE binary16 -> binary32, exact for every input (subnormals, inf, NaN payloads).
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu;
  const std::uint32_t mantissa = h & 0x3FFu;
  std::uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else {
    // Zero or subnormal: mantissa * 2^-24 is exact in float32.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-08f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(bits);
}

float load_f16(const std::uint8_t* p) { return half_to_float(load_u16(p)); }

void dequant_f32(const std::uint8_t* b, float* y) { std::memcpy(y, b, 4); }
void dequant_f16(const std::uint8_t* b, float* y) { *y = load_f16(b); }
void dequant_bf16(const std::uint8_t* b, float* y) {
  *y = std::bit_cast<float>(static_cast<std::uint32_t>(load_u16(b)) << 16);
}

// Q4_0: f16 d | 16 bytes of nibbles. Low nibbles are elements 0..15, high 16..31;
// value = d * (q - 8).
void dequant_q4_0(const std::uint8_t* b, float* y) {
  const float d = load_f16(b);
  const std::uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((qs[j] & 0x0F) - 8);
    y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

// Q4_1: f16 d | f16 m | 16 bytes of nibbles (as Q4_0); value = d * q + m.
void dequant_q4_1(const std::uint8_t* b, float* y) {
  const float d = load_f16(b), m = load_f16(b + 2);
  const std::uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(qs[j] & 0x0F) + m;
    y[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
  }
}

// The 5-bit quants: element j's low 4 bits are nibbles as in Q4_0, its fifth bit is bit j
// of the little-endian u32 qh.
int q5_value(const std::uint8_t* qs, std::uint32_t qh, int j) {
  const int low = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
  return low | static_cast<int>(((qh >> j) & 1u) << 4);
}

// Q5_0: f16 d | u32 qh | 16 bytes of nibbles; value = d * (q - 16).
void dequant_q5_0(const std::uint8_t* b, float* y) {
  const float d = load_f16(b);
  const std::uint32_t qh = load_u32(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q5_value(b + 6, qh, j) - 16);
}

// Q5_1: f16 d | f16 m | u32 qh | 16 bytes of nibbles; value = d * q + m.
void dequant_q5_1(const std::uint8_t* b, float* y) {
  const float d = load_f16(b), m = load_f16(b + 2);
  const std::uint32_t qh = load_u32(b + 4);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q5_value(b + 8, qh, j)) + m;
}

// Q8_0: f16 d | 32 x i8; value = q * d.
void dequant_q8_0(const std::uint8_t* b, float* y) {
  const float d = load_f16(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * d;
}

// Q8_K: f32 d | 256 x i8 | 16 x i16 block sums (unused here); value = d * q.
void dequant_q8_k(const std::uint8_t* b, float* y) {
  float d;
  std::memcpy(&d, b, 4);
  for (int j = 0; j < 256; ++j) y[j] = d * static_cast<float>(static_cast<std::int8_t>(b[4 + j]));
}

// In Q2_K, Q3_K and Q6_K the 2-bit fields of each 32-byte group hold four runs of 32
// elements: element e of a 128-element half uses byte (e % 32) of the half's group, bits
// 2 * (e / 32) and up.
int two_bits(const std::uint8_t* group, int e) { return (group[e % 32] >> (2 * (e / 32))) & 3; }

// Q2_K: 16 scale bytes (low nibble scale, high nibble min, one per 16 elements) | 64 bytes
// of 2-bit quants | f16 d | f16 dmin; value = (d * scale) * q - (dmin * min).
void dequant_q2_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* scales = b;
  const std::uint8_t* qs = b + 16;
  const float d = load_f16(b + 80), dmin = load_f16(b + 82);
  for (int e = 0; e < 256; ++e) {
    const std::uint8_t s = scales[e / 16];
    const float dl = d * static_cast<float>(s & 0x0F), ml = dmin * static_cast<float>(s >> 4);
    y[e] = dl * static_cast<float>(two_bits(qs + 32 * (e / 128), e % 128)) - ml;
  }
}

// Q3_K's sixteen 6-bit scales: low 4 bits from bytes 0..7 (low nibbles give scales 0..7,
// high nibbles 8..15), high 2 bits from bytes 8..11 (byte 8 + i % 4, bits 2 * (i / 4)).
int q3_k_scale(const std::uint8_t* s, int i) {
  const int low = i < 8 ? (s[i] & 0x0F) : (s[i - 8] >> 4);
  const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// Q3_K: 32 bytes hmask | 64 bytes of 2-bit quants | 12 bytes of scales | f16 d.
// q = low 2 bits - (hmask bit set ? 0 : 4), the hmask bit of element e being bit e / 32 of
// hmask[e % 32]; value = (d * scale) * q with one scale per 16 elements.
void dequant_q3_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* hmask = b;
  const std::uint8_t* qs = b + 32;
  const std::uint8_t* scales = b + 96;
  const float d = load_f16(b + 108);
  for (int e = 0; e < 256; ++e) {
    const float dl = d * static_cast<float>(q3_k_scale(scales, e / 16));
    const int high = (hmask[e % 32] >> (e / 32)) & 1;
    const int q = two_bits(qs + 32 * (e / 128), e % 128) - (high ? 0 : 4);
    y[e] = dl * static_cast<float>(q);
  }
}

// Q4_K / Q5_K: eight 6-bit (scale, min) pairs packed in 12 bytes. Pairs 0..3 are the low 6
// bits of bytes 0..3 (scale) and 4..7 (min); pairs 4..7 take their low 4 bits from the
// nibbles of bytes 8..11 and their top 2 bits from the spare top bits of bytes 0..7.
void k_scale_min(const std::uint8_t* s, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// The 4-bit quants of Q4_K / Q5_K: 32-byte groups, each holding two sub-blocks of 32
// (low nibbles the first, high nibbles the second).
int k_nibble(const std::uint8_t* qs, int e) {
  const int sub = e / 32;
  return (qs[32 * (sub / 2) + e % 32] >> (4 * (sub % 2))) & 0x0F;
}

// Q4_K: f16 d | f16 dmin | 12 bytes of scales | 128 bytes of nibbles;
// value = (d * scale) * q - (dmin * min), one (scale, min) per 32 elements.
void dequant_q4_k(const std::uint8_t* b, float* y) {
  const float d = load_f16(b), dmin = load_f16(b + 2);
  for (int sub = 0; sub < 8; ++sub) {
    int sc, mn;
    k_scale_min(b + 4, sub, &sc, &mn);
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(mn);
    for (int e = 32 * sub; e < 32 * sub + 32; ++e) y[e] = dl * static_cast<float>(k_nibble(b + 16, e)) - ml;
  }
}

// Q5_K: as Q4_K with 32 bytes qh after the scales: the fifth bit of element e is bit e / 32
// of qh[e % 32].
void dequant_q5_k(const std::uint8_t* b, float* y) {
  const float d = load_f16(b), dmin = load_f16(b + 2);
  const std::uint8_t* qh = b + 16;
  const std::uint8_t* qs = b + 48;
  for (int sub = 0; sub < 8; ++sub) {
    int sc, mn;
    k_scale_min(b + 4, sub, &sc, &mn);
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(mn);
    for (int e = 32 * sub; e < 32 * sub + 32; ++e) {
      const int q = k_nibble(qs, e) | (((qh[e % 32] >> sub) & 1) << 4);
      y[e] = dl * static_cast<float>(q) - ml;
    }
  }
}

// Q6_K: 128 bytes low nibbles | 64 bytes high 2-bit pairs | 16 x i8 scales | f16 d.
// Per 128-element half h: element e's low 4 bits are nibble e / 64 of ql[64 h + e % 64],
// its top 2 bits two_bits of the half's 32-byte qh group; q = that 6-bit value - 32;
// value = (d * scale) * q with one scale per 16 elements.
void dequant_q6_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* ql = b;
  const std::uint8_t* qh = b + 128;
  const auto* scales = reinterpret_cast<const std::int8_t*>(b + 192);
  const float d = load_f16(b + 208);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, r = e % 128;
    const int low = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
    const int q = (low | (two_bits(qh + 32 * h, r) << 4)) - 32;
    y[e] = (d * static_cast<float>(scales[e / 16])) * static_cast<float>(q);
  }
}

using BlockKernel = void (*)(const std::uint8_t*, float*);

BlockKernel kernel_of(GgufType t) {
  switch (t) {
    case GgufType::F32: return dequant_f32;
    case GgufType::F16: return dequant_f16;
    case GgufType::BF16: return dequant_bf16;
    case GgufType::Q4_0: return dequant_q4_0;
    case GgufType::Q4_1: return dequant_q4_1;
    case GgufType::Q5_0: return dequant_q5_0;
    case GgufType::Q5_1: return dequant_q5_1;
    case GgufType::Q8_0: return dequant_q8_0;
    case GgufType::Q2_K: return dequant_q2_k;
    case GgufType::Q3_K: return dequant_q3_k;
    case GgufType::Q4_K: return dequant_q4_k;
    case GgufType::Q5_K: return dequant_q5_k;
    case GgufType::Q6_K: return dequant_q6_k;
    case GgufType::Q8_K: return dequant_q8_k;
    default: return nullptr;
  }
}

}  // namespace

bool gguf_can_dequantize(GgufType t) { return kernel_of(t) != nullptr; }

std::string gguf_dequantizable_types() {
  std::string names;
  for (const auto& tr : kTypes)
    if (kernel_of(tr.type)) names += (names.empty() ? "" : ", ") + std::string(tr.name);
  return names;
}

void dequantize(GgufType type, const std::uint8_t* src, std::size_t src_bytes, std::int64_t count,
                float* dst) {
  const BlockKernel kernel = kernel_of(type);
  DARK_CHECK(kernel != nullptr, "dequantize: type ", gguf_type_name(type), " is not supported (supported: ",
             gguf_dequantizable_types(), ")");
  const TypeTraits& tr = known_traits(type);
  DARK_CHECK(count >= 0 && count % tr.block_size == 0, "dequantize: ", count, " values of type ", tr.name,
             " are not a whole number of ", tr.block_size, "-element blocks");
  const std::int64_t blocks = count / tr.block_size;
  DARK_CHECK(static_cast<std::uint64_t>(blocks) <= src_bytes / static_cast<std::uint64_t>(tr.type_bytes),
             "dequantize: ", count, " values of type ", tr.name, " need ", blocks * tr.type_bytes,
             " bytes, got ", src_bytes);
  // Blocks are independent, so the split over threads cannot change any value.
  cpu::RegionErrors errors;
#pragma omp parallel for schedule(static) if (blocks >= 4096)
  for (std::int64_t i = 0; i < blocks; ++i)
    errors.run(i, [&] { kernel(src + i * tr.type_bytes, dst + i * tr.block_size); });
  errors.rethrow();
}

}  // namespace dark::data
