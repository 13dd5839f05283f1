// training.device -> the Device a run uses. "cpu" is always there. "cuda" / "cuda:N" must
// exist: a build without the CUDA backend, a machine without a usable GPU and an index past
// the last GPU are errors that say which. "auto" takes the first GPU when one is usable and
// falls back to the CPU otherwise, saying why in the log.
#pragma once
#include <string>

#include "core/device.h"

namespace dark::train {

Device resolve_device(const std::string& setting);

}  // namespace dark::train
