// libFuzzer target: the safetensors reader (train/formats/safetensors.h) on arbitrary bytes. A file
// either parses or fails with dark::Error; a parsed file's tensors are CPU tensors whose
// elements are exactly the data region (F16 ones read as F32, so 2 bytes each in the file;
// each byte is read, so a short buffer shows up in AddressSanitizer).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "fuzz_util.h"
#include "train/formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  dark::formats::SafetensorsContents contents;
  try {
    contents = dark::formats::parse_safetensors(data, size, "fuzz");
  } catch (const dark::Error&) {
    return 0;
  }
  std::uint64_t header = 0;
  for (int i = 0; i < 8; ++i) header |= static_cast<std::uint64_t>(data[i]) << (8 * i);
  // The reader accepted the header, so it is JSON: it says which tensors were F16 in the file.
  const nlohmann::json declared = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(data) + 8, header));
  std::uint64_t total = 0;
  unsigned sum = 0;
  for (const auto& [name, tensor] : contents.tensors) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(tensor.numel()) * dark::dtype_size(tensor.dtype());
    const auto* p = static_cast<const unsigned char*>(tensor.raw_data());
    for (std::uint64_t i = 0; i < bytes; ++i) sum += p[i];
    const bool f16 = declared.at(name).at("dtype") == "F16";
    DARK_FUZZ_ASSERT(!f16 || tensor.dtype() == dark::DType::f32);
    total += f16 ? static_cast<std::uint64_t>(tensor.numel()) * 2 : bytes;
  }
  DARK_FUZZ_ASSERT(8 + header + total == size);
  (void)sum;
  return 0;
}
