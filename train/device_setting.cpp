// Device selection (see device_setting.h).
#include "train/device_setting.h"

#include <spdlog/spdlog.h>

#include "core/backend.h"
#include "core/error.h"

namespace dark::train {

namespace {

// Why no GPU can be used, or "" when one can.
// Asks the registry, not the build flags: a test program may install the CUDA emulator.
std::string why_no_gpu() {
  if (!cuda_backend_built())
    return "this build has no CUDA backend (configure with -DDARK_USE_CUDA=ON on a machine with the CUDA toolkit)";
  if (cuda_device_count() == 0)
    return "no GPU: the CUDA runtime finds no usable device (no GPU, or no or too old a driver)";
  return "";
}


}  // namespace

Device resolve_device(const std::string& setting) {
  if (setting == "auto") {
    const std::string why = why_no_gpu();
    if (why.empty()) return Device::cuda(0);
    spdlog::info("training.device auto: using the CPU; {}", why);
    return Device::cpu();
  }
  const Device device = Device::parse(setting);
  if (device.is_cpu()) return device;
  const std::string why = why_no_gpu();
  DARK_CHECK(why.empty(), "config: training.device: \"", setting, "\": ", why, "; use \"cpu\" or \"auto\"");
  const int count = cuda_device_count();
  DARK_CHECK(device.index < count, "config: training.device: \"", setting, "\" does not exist: this machine has ",
             count, " GPU(s), cuda:0 to cuda:", count - 1);
  return device;
}

}  // namespace dark::train
