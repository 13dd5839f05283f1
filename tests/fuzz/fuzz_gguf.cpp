// libFuzzer target: the GGUF reader (data/gguf.h). The input is written to a memfd and
// opened by path (GgufFile maps files); every metadata key is then read back through its
// getter, type_of and describe, and every tensor whose type dequantises is read as f32.
// Only dark::Error may come out; the getters' own errors (a u64 above INT64_MAX) are
// allowed per key.
#include <cstdint>

#include "core/error.h"
#include "data/gguf.h"
#include "fuzz_util.h"

namespace {

void read_key(const dark::data::GgufFile& f, const std::string& key) {
  const std::string type = f.type_of(key);
  (void)f.describe(key);
  if (type == "string") {
    (void)f.get_string(key);
  } else if (type == "bool") {
    (void)f.get_bool(key);
  } else if (type == "f32" || type == "f64") {
    (void)f.get_float(key);
  } else if (type == "array<string>") {
    (void)f.get_string_array(key);
  } else if (type == "array<f32>" || type == "array<f64>") {
    (void)f.get_float_array(key);
  } else if (type.rfind("array<", 0) == 0 && type != "array<bool>" && type != "array<array>") {
    (void)f.get_int_array(key);
    (void)f.get_float_array(key);
  } else if (type.rfind("array", 0) != 0) {
    (void)f.get_int(key);
    (void)f.get_float(key);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const dark::fuzz::MemFile file(data, size);
  try {
    const dark::data::GgufFile f = dark::data::GgufFile::open(file.path());
    DARK_FUZZ_ASSERT(f.data_offset() % f.alignment() == 0);
    for (const std::string& key : f.keys()) {
      try {
        read_key(f, key);
      } catch (const dark::Error&) {
      }
    }
    for (const auto& t : f.tensors()) {
      DARK_FUZZ_ASSERT(f.find_tensor(t.name) != nullptr);
      DARK_FUZZ_ASSERT(f.data_offset() + t.offset + t.bytes <= size);
      if (dark::data::gguf_can_dequantize(t.type) && t.numel() <= (1 << 20)) {
        const dark::Tensor x = f.read_f32(t.name);
        DARK_FUZZ_ASSERT(x.numel() == t.numel());
      }
    }
  } catch (const dark::Error&) {
  }
  return 0;
}
