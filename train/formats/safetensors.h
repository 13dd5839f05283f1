// The safetensors file format (Hugging Face), written and read byte-exactly:
//   8 bytes  N, the header length, little-endian u64
//   N bytes  JSON header {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape":
//            [..], "data_offsets": [begin, end]}, ...}, compact, padded with spaces to a
//            multiple of 8
//   data     each tensor's elements, C order, little-endian, back to back; offsets are
//            relative to the start of the data region
// The writer orders tensors as the reference implementation (and so Python's
// safetensors.save_file) does: by dtype alignment, largest first (I64, F64, F32, I32, BF16),
// then by name; "__metadata__" comes first and only when metadata is non-empty. A file
// written here is therefore byte-identical to the one Python writes for the same tensors
// (metadata with more than one key aside: Python's key order is a hash order, ours sorted).
// The reader accepts any tensor order and validates everything before returning tensors:
// header length vs file size, JSON, dtype, shape * element size == offset span, offsets in
// range, non-overlapping and covering the data region exactly. Errors name the file and tensor.
// F16 tensors (Hugging Face models saved in float16; we have no f16 dtype) are read into F32
// tensors, exactly; the writer never writes F16.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "core/tensor.h"

namespace dark::formats {

using TensorMap = std::map<std::string, Tensor>;
using SafetensorsMetadata = std::map<std::string, std::string>;

struct SafetensorsContents {
  TensorMap tensors;             // on the CPU, contiguous
  SafetensorsMetadata metadata;  // the "__metadata__" object; empty when the file has none
};

// The format's dtype names for ours: F32, F64, BF16, I32, I64.
const char* safetensors_dtype_name(DType dtype);

// The complete header (its 8-byte length prefix excluded) the writer emits for these
// tensors: compact JSON padded with spaces to a multiple of 8.
std::string safetensors_header(const TensorMap& tensors, const SafetensorsMetadata& metadata = {});

// Writes tensors (any device, any layout: copied to CPU contiguous memory one at a time) to
// `path` atomically (temp file, fsync, rename). Names must be non-empty, valid UTF-8 and not
// "__metadata__"; every tensor must be defined.
void save_safetensors(const std::filesystem::path& path, const TensorMap& tensors,
                      const SafetensorsMetadata& metadata = {});

// Reads a file (through a read-only memory map) into CPU tensors.
SafetensorsContents load_safetensors(const std::filesystem::path& path);
// Parses a whole file's bytes already in memory; `source` names it in errors.
SafetensorsContents parse_safetensors(const std::uint8_t* bytes, std::size_t size, const std::string& source);

}  // namespace dark::formats
