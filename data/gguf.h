// GGUF reader (versions 2 and 3, little-endian): metadata key/value pairs, tensor infos and
// on-demand dequantisation of tensor data to float32.
//
// Layout:
//   char[4] "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count x (string key | u32 value type | value)
//   tensor_count x (string name | u32 n_dims | u64 dims[n_dims] | u32 type | u64 offset)
//   padding to a multiple of general.alignment (default 32) | tensor data
// A string is u64 length + bytes; an array is u32 element type + u64 count + elements.
// Tensor offsets are relative to the start of the data section and aligned.
//
// Invariants after open(): every tensor's dims are positive, its row length (dims[0]) is a
// multiple of its type's block size, and its data [offset, offset + bytes) lies inside the
// file. Every failure is a dark::Error whose message starts with the file path.
// The file is memory-mapped; copies of a GgufFile share the mapping.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace dark::data {

// Tensor element types as numbered by ggml (values are part of the file format).
enum class GgufType : std::uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

// "Q4_1"; "type 99" for values this reader does not know.
std::string gguf_type_name(GgufType t);
// Whether `t` is a tensor type this reader knows the block layout of.
bool gguf_type_known(GgufType t);
// Elements per block and bytes per block; throw dark::Error for unknown types.
std::int64_t gguf_block_size(GgufType t);
std::int64_t gguf_type_bytes(GgufType t);
// Whether dequantize() supports `t`: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
bool gguf_can_dequantize(GgufType t);
// Those types' names, comma-separated ("F32, F16, Q4_0, ..."), for error messages.
std::string gguf_dequantizable_types();

// Dequantises `count` values (a multiple of the type's block size) from `src`, which must
// hold at least count / block_size * type_bytes bytes, into dst[0, count). Bit-exact with
// gguf-py / ggml (each value is computed as scale * q [+/- min] in float32).
void dequantize(GgufType type, const std::uint8_t* src, std::size_t src_bytes, std::int64_t count,
                float* dst);

struct GgufTensorInfo {
  std::string name;
  std::vector<std::int64_t> dims;  // GGUF order: dims[0] is the fastest-varying (row length)
  GgufType type = GgufType::F32;
  std::uint64_t offset = 0;  // from the start of the data section
  std::uint64_t bytes = 0;   // size of the tensor's data
  std::int64_t numel() const;
};

class GgufFile {
 public:
  // Maps and parses `path`; throws dark::Error naming the path and the problem.
  static GgufFile open(const std::string& path);

  std::uint32_t version() const;
  const std::string& path() const;
  // Byte offset of the data section in the file (a multiple of alignment()).
  std::uint64_t data_offset() const;
  std::uint64_t alignment() const;

  // ---- metadata ----
  // The getters throw naming the path and key when the key is missing or holds a value of
  // another kind. get_int accepts every integer type (u64 above INT64_MAX is an error);
  // get_float accepts f32, f64 and integers; the array getters convert their elements the
  // same way.
  bool has(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  std::int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<std::int64_t> get_int_array(const std::string& key) const;
  std::vector<double> get_float_array(const std::string& key) const;
  // Keys in file order.
  std::vector<std::string> keys() const;
  // The value's GGUF type name: "u32", "string", "array<string>", "array<array<i32>>".
  std::string type_of(const std::string& key) const;
  // Short printable form for logs: strings quoted and cut, arrays as
  // `array<string>[49152] ["<unk>", "<s>", "</s>", ...]`.
  std::string describe(const std::string& key) const;

  // ---- tensors ----
  const std::vector<GgufTensorInfo>& tensors() const;
  const GgufTensorInfo* find_tensor(const std::string& name) const;  // nullptr when absent
  // The tensor's raw bytes inside the mapping (valid while any copy of this GgufFile lives).
  const std::uint8_t* tensor_data(const GgufTensorInfo& info) const;
  // Dequantised float32 tensor, row-major with the GGUF dims reversed: dims [ne0, ne1]
  // become shape {ne1, ne0}. Throws naming the tensor when absent or of an unsupported type.
  Tensor read_f32(const std::string& name) const;

 private:
  struct Impl;
  explicit GgufFile(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace dark::data
