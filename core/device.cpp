// Device parsing and printing.
#include "core/device.h"

#include <cstdlib>

#include "core/error.h"

namespace dark {

const char* device_type_name(DeviceType t) { return t == DeviceType::cpu ? "cpu" : "cuda"; }

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5) {
    char* end = nullptr;
    const long index = std::strtol(text.c_str() + 5, &end, 10);
    if (*end == '\0' && index >= 0) return cuda(static_cast<int>(index));
  }
  throw Error(str("invalid device '", text, "': expected cpu, cuda or cuda:N"));
}

std::string Device::to_string() const {
  return is_cpu() ? "cpu" : "cuda:" + std::to_string(index);
}

}  // namespace dark
