// libFuzzer target: the safetensors reader (train/safetensors.h) on arbitrary bytes. A file
// either parses or fails with dark::Error; a parsed file's tensors are CPU tensors whose
// bytes are exactly the data region (each byte is read, so a short buffer shows up in
// AddressSanitizer).
#include <cstdint>

#include "core/error.h"
#include "fuzz_util.h"
#include "train/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  dark::train::SafetensorsContents contents;
  try {
    contents = dark::train::parse_safetensors(data, size, "fuzz");
  } catch (const dark::Error&) {
    return 0;
  }
  std::uint64_t total = 0;
  unsigned sum = 0;
  for (const auto& [name, tensor] : contents.tensors) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(tensor.numel()) * dark::dtype_size(tensor.dtype());
    const auto* p = static_cast<const unsigned char*>(tensor.raw_data());
    for (std::uint64_t i = 0; i < bytes; ++i) sum += p[i];
    total += bytes;
  }
  std::uint64_t header = 0;
  for (int i = 0; i < 8; ++i) header |= static_cast<std::uint64_t>(data[i]) << (8 * i);
  DARK_FUZZ_ASSERT(8 + header + total == size);
  (void)sum;
  return 0;
}
