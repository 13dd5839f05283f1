// Where a tensor's memory lives: the CPU or the N-th CUDA device.
#pragma once
#include <string>

namespace dark {

enum class DeviceType : unsigned char { cpu = 0, cuda = 1 };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  // Parses "cpu", "cuda" or "cuda:N"; throws on anything else.
  static Device parse(const std::string& text);

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  std::string to_string() const;
  friend bool operator==(const Device&, const Device&) = default;
};

const char* device_type_name(DeviceType t);

}  // namespace dark
