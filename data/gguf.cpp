// GGUF reader. See gguf.h for the layout.
//
// The file is memory-mapped once. open() walks every byte of the header, metadata and
// tensor infos through a bounds-checked cursor, so a corrupt count or length fails before
// anything is allocated for it. Metadata values are not copied: each key remembers where its
// value lies in the mapping and the getters decode it from there on demand, which keeps
// memory proportional to what callers ask for (a 100k-entry vocabulary array costs nothing
// until get_string_array reads it).
#include "data/gguf.h"

#include <bit>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "core/error.h"
#include "core/file_io.h"

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

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

std::uint16_t load_u16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
std::uint32_t load_u32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
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

std::string supported_types() {
  std::string names;
  for (const auto& tr : kTypes)
    if (kernel_of(tr.type)) names += (names.empty() ? "" : ", ") + std::string(tr.name);
  return names;
}

}  // namespace

bool gguf_can_dequantize(GgufType t) { return kernel_of(t) != nullptr; }

void dequantize(GgufType type, const std::uint8_t* src, std::size_t src_bytes, std::int64_t count,
                float* dst) {
  const BlockKernel kernel = kernel_of(type);
  DARK_CHECK(kernel != nullptr, "dequantize: type ", gguf_type_name(type), " is not supported (supported: ",
             supported_types(), ")");
  const TypeTraits& tr = known_traits(type);
  DARK_CHECK(count >= 0 && count % tr.block_size == 0, "dequantize: ", count, " values of type ", tr.name,
             " are not a whole number of ", tr.block_size, "-element blocks");
  const std::int64_t blocks = count / tr.block_size;
  DARK_CHECK(static_cast<std::uint64_t>(blocks) <= src_bytes / static_cast<std::uint64_t>(tr.type_bytes),
             "dequantize: ", count, " values of type ", tr.name, " need ", blocks * tr.type_bytes,
             " bytes, got ", src_bytes);
  // Blocks are independent, so the split over threads cannot change any value.
#pragma omp parallel for schedule(static) if (blocks >= 4096)
  for (std::int64_t i = 0; i < blocks; ++i) kernel(src + i * tr.type_bytes, dst + i * tr.block_size);
}

// ============================================================================ parsing

namespace {

enum class ValueType : std::uint32_t { u8 = 0, i8, u16, i16, u32, i32, f32, boolean, string, array, u64, i64, f64 };
constexpr std::uint32_t kValueTypeCount = 13;
constexpr int kMaxArrayDepth = 8;
constexpr std::uint64_t kDefaultAlignment = 32;
constexpr std::uint32_t kMaxDims = 4;

const char* value_type_name(ValueType t) {
  static const char* names[] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                "bool", "string", "array", "u64", "i64", "f64"};
  return names[static_cast<std::uint32_t>(t)];
}

// Bytes of a fixed-size value; 0 for strings and arrays.
std::uint64_t fixed_size(ValueType t) {
  switch (t) {
    case ValueType::u8: case ValueType::i8: case ValueType::boolean: return 1;
    case ValueType::u16: case ValueType::i16: return 2;
    case ValueType::u32: case ValueType::i32: case ValueType::f32: return 4;
    case ValueType::u64: case ValueType::i64: case ValueType::f64: return 8;
    default: return 0;
  }
}

// The fewest bytes one value of type t occupies: what bounds a count read from the file.
std::uint64_t min_size(ValueType t) {
  if (t == ValueType::string) return 8;
  if (t == ValueType::array) return 12;
  return fixed_size(t);
}

bool is_integer(ValueType t) {
  return fixed_size(t) > 0 && t != ValueType::f32 && t != ValueType::f64 && t != ValueType::boolean;
}

// A bounds-checked little-endian cursor over the mapped file. `context` says what is being
// read ("tensor info #3 'blk.0.attn_q.weight'") for the truncation message.
class Cursor {
 public:
  Cursor(const std::string& path, const std::uint8_t* data, std::uint64_t size, std::uint64_t pos = 0)
      : path_(path), data_(data), size_(size), pos_(pos) {}

  std::uint64_t pos() const { return pos_; }
  std::uint64_t remaining() const { return size_ - pos_; }
  void set_context(std::string context) { context_ = std::move(context); }

  const std::uint8_t* take(std::uint64_t n, const char* what) {
    if (n > remaining())
      throw Error(str(path_, ": truncated file: ", context_, context_.empty() ? "" : ": ", what, " at offset ",
                      pos_, " needs ", n, " bytes but only ", remaining(), " remain (file size ", size_, ")"));
    const std::uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }
  template <class T>
  T read(const char* what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }
  std::string_view read_string(const char* what) {
    const auto n = read<std::uint64_t>(what);
    return {reinterpret_cast<const char*>(take(n, what)), static_cast<std::size_t>(n)};
  }
  [[noreturn]] void fail(const std::string& problem) const {
    throw Error(str(path_, ": ", context_, context_.empty() ? "" : ": ", problem));
  }
  // Fails unless `count` elements of at least `each` bytes can still fit.
  void check_count(std::uint64_t count, std::uint64_t each, const char* what) {
    if (each > 0 && count > remaining() / each)
      throw Error(str(path_, ": ", context_, context_.empty() ? "" : ": ", what, " ", count, " at offset ", pos_,
                      " cannot fit in the ", remaining(), " bytes left in the file (file size ", size_, ")"));
  }

 private:
  const std::string& path_;
  const std::uint8_t* data_;
  std::uint64_t size_;
  std::uint64_t pos_;
  std::string context_;
};

// Where one metadata value lies in the mapping: `pos` is the first byte of the value (for
// arrays: of the first element, after the element type and count).
struct Value {
  ValueType type = ValueType::u8;
  ValueType elem = ValueType::u8;  // arrays only
  std::uint64_t count = 0;         // arrays only
  std::uint64_t pos = 0;
};

ValueType read_value_type(Cursor& c, const char* what) {
  const auto t = c.read<std::uint32_t>(what);
  if (t >= kValueTypeCount) c.fail(str("unknown value type ", t, " at offset ", c.pos() - 4));
  return static_cast<ValueType>(t);
}

// Moves the cursor over one value of type t, checking every length on the way.
void skip_value(Cursor& c, ValueType t, int depth);

void skip_array_body(Cursor& c, ValueType elem, std::uint64_t count, int depth) {
  c.check_count(count, min_size(elem), "array length");
  if (fixed_size(elem) > 0) {
    c.take(count * fixed_size(elem), "array elements");
    return;
  }
  for (std::uint64_t i = 0; i < count; ++i) skip_value(c, elem, depth);
}

void skip_value(Cursor& c, ValueType t, int depth) {
  if (t == ValueType::string) {
    c.read_string("string");
  } else if (t == ValueType::array) {
    if (depth >= kMaxArrayDepth)
      c.fail(str("arrays nested deeper than ", kMaxArrayDepth, " levels at offset ", c.pos()));
    const ValueType elem = read_value_type(c, "array element type");
    skip_array_body(c, elem, c.read<std::uint64_t>("array length"), depth + 1);
  } else {
    c.take(fixed_size(t), value_type_name(t));
  }
}

// Reads one key's value header and skips its body; the Value points at the body.
Value parse_value(Cursor& c) {
  Value v;
  v.type = read_value_type(c, "value type");
  if (v.type == ValueType::array) {
    v.elem = read_value_type(c, "array element type");
    v.count = c.read<std::uint64_t>("array length");
    v.pos = c.pos();
    skip_array_body(c, v.elem, v.count, 1);
  } else {
    v.pos = c.pos();
    skip_value(c, v.type, 0);
  }
  return v;
}

// A signed value's two's-complement bits, sign-extended to 64.
template <class Signed>
std::uint64_t sign_extend(std::uint64_t raw) {
  return static_cast<std::uint64_t>(static_cast<std::int64_t>(static_cast<Signed>(raw)));
}

// Integer value of type t at p, widened (u64 kept as its bit pattern).
std::uint64_t load_integer_bits(ValueType t, const std::uint8_t* p) {
  switch (t) {
    case ValueType::u8: return p[0];
    case ValueType::i8: return sign_extend<std::int8_t>(p[0]);
    case ValueType::u16: return load_u16(p);
    case ValueType::i16: return sign_extend<std::int16_t>(load_u16(p));
    case ValueType::u32: return load_u32(p);
    case ValueType::i32: return sign_extend<std::int32_t>(load_u32(p));
    default: {
      std::uint64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
}

double load_real(ValueType t, const std::uint8_t* p) {
  if (t == ValueType::f32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  double d;
  std::memcpy(&d, p, 8);
  return d;
}

std::string u128_string(unsigned __int128 v) {
  std::string s;
  do {
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  } while (v != 0);
  return s;
}

}  // namespace

struct GgufFile::Impl {
  std::string path;
  std::unique_ptr<MappedFile> file;
  std::uint32_t version = 0;
  std::uint64_t alignment = kDefaultAlignment;
  std::uint64_t data_offset = 0;
  std::vector<std::pair<std::string, Value>> kvs;  // file order
  std::unordered_map<std::string, std::size_t> kv_index;
  std::vector<GgufTensorInfo> tensors;
  std::unordered_map<std::string, std::size_t> tensor_index;

  const std::uint8_t* bytes() const { return file->data(); }
  std::uint64_t size() const { return file->size(); }
  Cursor cursor_at(std::uint64_t pos) const { return Cursor(path, bytes(), size(), pos); }
  std::string where() const { return path + ": "; }

  void parse();
  void parse_header(Cursor& c, std::uint64_t* tensor_count, std::uint64_t* kv_count);
  void parse_metadata(Cursor& c, std::uint64_t kv_count);
  void parse_alignment();
  void parse_tensor_info(Cursor& c, std::uint64_t index);
  void check_tensor_data(const GgufTensorInfo& t) const;

  const Value& value(const std::string& key) const;
  [[noreturn]] void wrong_type(const std::string& key, const char* wanted) const;
  std::int64_t integer_at(const std::string& key, ValueType t, const std::uint8_t* p) const;
  double real_at(const std::string& key, ValueType t, const std::uint8_t* p) const;
  std::string type_name(const Value& v) const;
  std::string describe(const Value& v) const;
};

void GgufFile::Impl::parse_header(Cursor& c, std::uint64_t* tensor_count, std::uint64_t* kv_count) {
  c.set_context("header");
  const std::uint8_t* magic = c.take(4, "magic");
  if (std::memcmp(magic, "GGUF", 4) != 0)
    throw Error(str(where(), "bad magic '", std::string(reinterpret_cast<const char*>(magic), 4),
                    "' (expected 'GGUF'): not a GGUF file"));
  version = c.read<std::uint32_t>("version");
  if (__builtin_bswap32(version) == 2 || __builtin_bswap32(version) == 3)
    throw Error(str(where(), "big-endian GGUF files are not supported"));
  if (version != 2 && version != 3)
    throw Error(str(where(), "GGUF version ", version, " is not supported (only versions 2 and 3)"));
  *tensor_count = c.read<std::uint64_t>("tensor count");
  *kv_count = c.read<std::uint64_t>("metadata key count");
  // 24 bytes: the smallest tensor info (empty name, no dims, type, offset); 13: the smallest
  // key/value (empty key, type, one byte).
  c.check_count(*tensor_count, 24, "tensor count");
  c.check_count(*kv_count, 13, "metadata key count");
}

void GgufFile::Impl::parse_metadata(Cursor& c, std::uint64_t kv_count) {
  kvs.reserve(kv_count);
  for (std::uint64_t i = 0; i < kv_count; ++i) {
    c.set_context(str("metadata key #", i));
    std::string key(c.read_string("key"));
    c.set_context(str("metadata key #", i, " '", key, "'"));
    if (kv_index.count(key)) throw Error(str(where(), "duplicate metadata key '", key, "'"));
    Value v = parse_value(c);
    kv_index.emplace(key, kvs.size());
    kvs.emplace_back(std::move(key), v);
  }
}

void GgufFile::Impl::parse_alignment() {
  const auto it = kv_index.find("general.alignment");
  if (it == kv_index.end()) return;
  const Value& v = kvs[it->second].second;
  if (!is_integer(v.type)) throw Error(str(where(), "general.alignment is ", type_name(v), ", not an integer"));
  const std::int64_t a = integer_at("general.alignment", v.type, bytes() + v.pos);
  // At most 2^31 so that rounding an offset up cannot overflow.
  if (a <= 0 || a > (std::int64_t{1} << 31) || !std::has_single_bit(static_cast<std::uint64_t>(a)))
    throw Error(str(where(), "general.alignment ", a, " is not a power of two in [1, 2^31]"));
  alignment = static_cast<std::uint64_t>(a);
}

void GgufFile::Impl::parse_tensor_info(Cursor& c, std::uint64_t index) {
  c.set_context(str("tensor info #", index));
  GgufTensorInfo t;
  t.name = std::string(c.read_string("name"));
  const std::string label = str("tensor '", t.name, "'");
  c.set_context(str("tensor info #", index, " '", t.name, "'"));
  if (tensor_index.count(t.name)) throw Error(str(where(), "duplicate tensor name '", t.name, "'"));
  const auto n_dims = c.read<std::uint32_t>("n_dims");
  if (n_dims > kMaxDims) throw Error(str(where(), label, " has ", n_dims, " dimensions (at most ", kMaxDims, ")"));
  std::int64_t numel = 1;
  for (std::uint32_t d = 0; d < n_dims; ++d) {
    const auto dim = c.read<std::uint64_t>("dimension");
    if (dim == 0) throw Error(str(where(), label, " has a zero-size dimension ", d));
    if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
        __builtin_mul_overflow(numel, static_cast<std::int64_t>(dim), &numel))
      throw Error(str(where(), label, ": dimension ", d, " (", dim, ") overflows the element count"));
    t.dims.push_back(static_cast<std::int64_t>(dim));
  }
  const auto type = c.read<std::uint32_t>("type");
  t.type = static_cast<GgufType>(type);
  const TypeTraits* tr = traits_of(t.type);
  if (tr == nullptr) throw Error(str(where(), label, " has unknown type ", type));
  const std::int64_t row = t.dims.empty() ? 1 : t.dims[0];
  if (row % tr->block_size != 0)
    throw Error(str(where(), label, " row length ", row, " is not a multiple of the ", tr->name, " block size ",
                    tr->block_size));
  std::int64_t bytes_needed;
  if (__builtin_mul_overflow(numel / tr->block_size, tr->type_bytes, &bytes_needed))
    throw Error(str(where(), label, ": data size overflows (", numel, " elements of ", tr->name, ")"));
  t.bytes = static_cast<std::uint64_t>(bytes_needed);
  t.offset = c.read<std::uint64_t>("offset");
  tensor_index.emplace(t.name, tensors.size());
  tensors.push_back(std::move(t));
}

void GgufFile::Impl::check_tensor_data(const GgufTensorInfo& t) const {
  if (t.offset % alignment != 0)
    throw Error(str(where(), "tensor '", t.name, "' offset ", t.offset, " is not a multiple of the alignment ",
                    alignment));
  const unsigned __int128 begin = static_cast<unsigned __int128>(data_offset) + t.offset;
  const unsigned __int128 end = begin + t.bytes;
  if (end > size())
    throw Error(str(where(), "tensor '", t.name, "' data [", u128_string(begin), ", ", u128_string(end),
                    ") lies beyond the end of the file (", size(), " bytes)"));
}

void GgufFile::Impl::parse() {
  Cursor c = cursor_at(0);
  std::uint64_t tensor_count = 0, kv_count = 0;
  parse_header(c, &tensor_count, &kv_count);
  parse_metadata(c, kv_count);
  parse_alignment();
  tensors.reserve(tensor_count);
  for (std::uint64_t i = 0; i < tensor_count; ++i) parse_tensor_info(c, i);
  // Alignment <= 2^31 and pos <= file size, so this cannot overflow.
  data_offset = (c.pos() + alignment - 1) / alignment * alignment;
  for (const auto& t : tensors) check_tensor_data(t);
}

// ---- metadata access ----

const Value& GgufFile::Impl::value(const std::string& key) const {
  const auto it = kv_index.find(key);
  if (it == kv_index.end()) throw Error(str(where(), "metadata key '", key, "' is missing"));
  return kvs[it->second].second;
}

void GgufFile::Impl::wrong_type(const std::string& key, const char* wanted) const {
  throw Error(str(where(), "metadata key '", key, "' is ", type_name(value(key)), ", not ", wanted));
}

std::int64_t GgufFile::Impl::integer_at(const std::string& key, ValueType t, const std::uint8_t* p) const {
  const std::uint64_t bits = load_integer_bits(t, p);
  if (t == ValueType::u64 && bits > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    throw Error(str(where(), "metadata key '", key, "' value ", bits, " does not fit in int64"));
  return static_cast<std::int64_t>(bits);
}

double GgufFile::Impl::real_at(const std::string& key, ValueType t, const std::uint8_t* p) const {
  if (t == ValueType::f32 || t == ValueType::f64) return load_real(t, p);
  if (t == ValueType::u64) return static_cast<double>(load_integer_bits(t, p));
  return static_cast<double>(integer_at(key, t, p));
}

std::string GgufFile::Impl::type_name(const Value& v) const {
  if (v.type != ValueType::array) return value_type_name(v.type);
  if (v.elem != ValueType::array) return str("array<", value_type_name(v.elem), ">");
  return "array<array>";
}

// ---- describe ----

namespace {

constexpr std::size_t kDescribeChars = 48;
constexpr std::uint64_t kDescribeItems = 3;

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size() && i < kDescribeChars; ++i) {
    const auto ch = static_cast<unsigned char>(s[i]);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20 || ch == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  if (s.size() > kDescribeChars) out += "...";
  return out + "\"";
}

// One value of type t at the cursor, printed (arrays summarised), cursor moved past it.
std::string describe_at(Cursor& c, ValueType t, int depth) {
  if (t == ValueType::string) return quoted(c.read_string("string"));
  if (t == ValueType::boolean) return c.read<std::uint8_t>("bool") ? "true" : "false";
  if (t == ValueType::f32 || t == ValueType::f64) return str(load_real(t, c.take(fixed_size(t), "real")));
  if (t != ValueType::array) {
    const std::uint64_t bits = load_integer_bits(t, c.take(fixed_size(t), "integer"));
    return t == ValueType::u64 ? str(bits) : str(static_cast<std::int64_t>(bits));
  }
  const ValueType elem = read_value_type(c, "array element type");
  const auto count = c.read<std::uint64_t>("array length");
  std::string out = str("array<", value_type_name(elem), ">[", count, "] [");
  for (std::uint64_t i = 0; i < count; ++i) {
    if (i == kDescribeItems) {
      out += ", ...";
      // Skip the rest without printing it.
      skip_array_body(c, elem, count - i, depth + 1);
      break;
    }
    out += (i ? ", " : "") + describe_at(c, elem, depth + 1);
  }
  return out + "]";
}

}  // namespace

std::string GgufFile::Impl::describe(const Value& v) const {
  Cursor c = cursor_at(v.pos);
  if (v.type != ValueType::array) return describe_at(c, v.type, 0);
  // The array header lies before v.pos: rewind over it (element type u32 + count u64).
  Cursor head = cursor_at(v.pos - 12);
  return describe_at(head, ValueType::array, 0);
}

// ============================================================================ GgufFile

std::int64_t GgufTensorInfo::numel() const {
  std::int64_t n = 1;
  for (const auto d : dims) n *= d;
  return n;
}

GgufFile GgufFile::open(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  try {
    impl->file = std::make_unique<MappedFile>(path);
  } catch (const Error& e) {
    throw Error(str(path, ": cannot open: ", e.what()));
  }
  impl->parse();
  return GgufFile(std::move(impl));
}

std::uint32_t GgufFile::version() const { return impl_->version; }
const std::string& GgufFile::path() const { return impl_->path; }
std::uint64_t GgufFile::data_offset() const { return impl_->data_offset; }
std::uint64_t GgufFile::alignment() const { return impl_->alignment; }

bool GgufFile::has(const std::string& key) const { return impl_->kv_index.count(key) > 0; }

std::string GgufFile::get_string(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (v.type != ValueType::string) impl_->wrong_type(key, "a string");
  Cursor c = impl_->cursor_at(v.pos);
  return std::string(c.read_string("string"));
}

std::int64_t GgufFile::get_int(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (!is_integer(v.type)) impl_->wrong_type(key, "an integer");
  return impl_->integer_at(key, v.type, impl_->bytes() + v.pos);
}

double GgufFile::get_float(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (!is_integer(v.type) && v.type != ValueType::f32 && v.type != ValueType::f64) impl_->wrong_type(key, "a number");
  return impl_->real_at(key, v.type, impl_->bytes() + v.pos);
}

bool GgufFile::get_bool(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (v.type != ValueType::boolean) impl_->wrong_type(key, "a bool");
  return impl_->bytes()[v.pos] != 0;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (v.type != ValueType::array || v.elem != ValueType::string) impl_->wrong_type(key, "array<string>");
  Cursor c = impl_->cursor_at(v.pos);
  std::vector<std::string> out;
  out.reserve(v.count);  // open() checked that count strings fit in the file
  for (std::uint64_t i = 0; i < v.count; ++i) out.emplace_back(c.read_string("string"));
  return out;
}

std::vector<std::int64_t> GgufFile::get_int_array(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (v.type != ValueType::array || !is_integer(v.elem)) impl_->wrong_type(key, "an integer array");
  const std::uint64_t each = fixed_size(v.elem);
  std::vector<std::int64_t> out(v.count);
  for (std::uint64_t i = 0; i < v.count; ++i)
    out[i] = impl_->integer_at(key, v.elem, impl_->bytes() + v.pos + i * each);
  return out;
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (v.type != ValueType::array || !(is_integer(v.elem) || v.elem == ValueType::f32 || v.elem == ValueType::f64))
    impl_->wrong_type(key, "a numeric array");
  const std::uint64_t each = fixed_size(v.elem);
  std::vector<double> out(v.count);
  for (std::uint64_t i = 0; i < v.count; ++i) out[i] = impl_->real_at(key, v.elem, impl_->bytes() + v.pos + i * each);
  return out;
}

std::vector<std::string> GgufFile::keys() const {
  std::vector<std::string> out;
  out.reserve(impl_->kvs.size());
  for (const auto& kv : impl_->kvs) out.push_back(kv.first);
  return out;
}

std::string GgufFile::type_of(const std::string& key) const { return impl_->type_name(impl_->value(key)); }

std::string GgufFile::describe(const std::string& key) const { return impl_->describe(impl_->value(key)); }

const std::vector<GgufTensorInfo>& GgufFile::tensors() const { return impl_->tensors; }

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  const auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

const std::uint8_t* GgufFile::tensor_data(const GgufTensorInfo& info) const {
  return impl_->bytes() + impl_->data_offset + info.offset;
}

Tensor GgufFile::read_f32(const std::string& name) const {
  const GgufTensorInfo* info = find_tensor(name);
  DARK_CHECK(info != nullptr, impl_->where(), "no tensor named '", name, "'");
  DARK_CHECK(gguf_can_dequantize(info->type), impl_->where(), "tensor '", name, "' has type ",
             gguf_type_name(info->type), ", which cannot be dequantised (supported: ", supported_types(), ")");
  Shape shape(info->dims.rbegin(), info->dims.rend());
  Tensor out = Tensor::empty(shape, DType::f32);
  dequantize(info->type, tensor_data(*info), info->bytes, info->numel(), out.data<float>());
  return out;
}

}  // namespace dark::data
