// What tests may ask of the CUDA emulator (libdarkformer_cuda_emulator.so): whether it is
// the CUDA backend of this process, its capacity, and how many device-to-host copies the
// host has made (a test checks that a training step reads back once). Exported from the
// library, whose other symbols are hidden.
#pragma once
#include <cstddef>
#include <cstdint>

#define DARK_EMULATOR_API __attribute__((visibility("default")))

namespace dark::cuda_emu {

// True once the emulator's backend and kernels are registered as the CUDA ones.
DARK_EMULATOR_API bool active();
DARK_EMULATOR_API void set_memory_capacity(std::size_t bytes);
DARK_EMULATOR_API std::size_t memory_capacity();
// Device-to-host copies since the process started.
DARK_EMULATOR_API std::uint64_t copies_to_host();

}  // namespace dark::cuda_emu
