// What tests may ask of the CUDA emulator (libdarkformer_cuda_emulator.so): to install it as
// the CUDA backend of this process, whether it is, its capacity, how many device-to-host copies the
// host has made (a test checks that a training step reads back once), the register count
// it reports for kernels, and whether a trap broke its context. Exported from the
// library, whose other symbols are hidden.
#pragma once
#include <cstddef>
#include <cstdint>

#define DARK_EMULATOR_API __attribute__((visibility("default")))

namespace dark::cuda_emu {

// The name the emulator's backend registers under (core/backend.h: backend_name).
inline constexpr const char* kBackendName = "the CUDA emulator (the CUDA sources run on the CPU)";

// Makes the emulator this process's CUDA backend: its backend and every cuda kernel replace
// those registered (the real CUDA backend's, or none). Test programs call it once at start
// (tests/test_util.h); loading the library alone changes nothing, so a program linked with
// it by accident still runs on its real backend. Calling it again does nothing.
DARK_EMULATOR_API void install();
// For the emulated CUDA sources (not exported): what install() does, one registration each
// (core/dispatch.h's DARK_REGISTER_KERNEL and core/cuda/backend.cu call it at load time).
void on_install(void (*replace_entry)());
// True when the emulator serves "cuda" in this process: install() ran and nothing replaced it.
DARK_EMULATOR_API bool active();
DARK_EMULATOR_API void set_memory_capacity(std::size_t bytes);
DARK_EMULATOR_API std::size_t memory_capacity();
// Device-to-host copies since the process started.
DARK_EMULATOR_API std::uint64_t copies_to_host();
// CUDA graphs launched (cudaGraphLaunch) since the process started.
DARK_EMULATOR_API std::uint64_t graph_launches();
// The registers a thread that cudaFuncGetAttributes reports for every kernel (numRegs):
// kDefaultFunctionRegisters unless a test set another count (to see a kernel fall back when
// its register split would not fit).
inline constexpr int kDefaultFunctionRegisters = 168;
DARK_EMULATOR_API void set_function_registers(int count);
DARK_EMULATOR_API int function_registers();
// Whether a kernel has __trap()ped in this process: the sticky error of a GPU, which no call
// clears; every CUDA runtime call that needs the device (memory, copies, launches,
// synchronisation, streams, events, graphs) then returns cudaErrorLaunchFailure, and so does
// cudaGetLastError, every time. A test that traps runs in a child process (a death test).
DARK_EMULATOR_API bool context_broken();
// cuBLAS products run with cuBLAS's own workspace (none set since the handle's last
// cublasSetStream) since the process started.
DARK_EMULATOR_API std::uint64_t gemms_on_cublas_workspace();

}  // namespace dark::cuda_emu
