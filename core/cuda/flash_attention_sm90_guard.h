// Whether a bf16 flash-attention call on an H100 / H200 may run on the Hopper kernels
// (flash_attention_sm90*.cu: warp-specialised wgmma, mbarrier pipelines, setmaxnreg), or
// must run on the mma.sync kernels (flash_attention_bf16.cu), which share their contract.
// Decided once per configuration (device, direction, head dimension, causal, window, key
// mask) and process, before its first Hopper launch:
//   1. registers: each kernel's count at launch (cudaFuncGetAttributes) against what its
//      register split needs (tile_pipeline.cuh's RegisterSplit::kEntryNeeded); with fewer,
//      setmaxnreg would wait forever, so a mismatch logs a warning naming the kernel and both
//      counts, and the configuration runs on the mma.sync kernels;
//   2. a self-check (DARK_FLASH_SM90=check, the default): the configuration's Hopper and
//      mma.sync kernels run on one small problem of its kind (B 1, T = S = 200, 2 query heads
//      on 1 kv head, random bf16 inputs; window 90 and a key mask with a hole and right
//      padding when the configuration has them) and their results (out and lse, or dq, dk
//      and dv) must agree within the bounds the GPU tests hold bf16 attention to against the
//      CPU (|a - b| <= 5e-2 + 5e-2 |b| per element, 2e-2 in relative L2); beyond them an
//      error names the kernel, the configuration and the difference, and the configuration
//      runs on the mma.sync kernels for the rest of the process.
// DARK_FLASH_SM90 (read at every call): check (default), on (step 1 only), off (never the
// Hopper kernels). A configuration first met while a CUDA graph is being captured cannot be
// self-checked then (the check reads its results back): that call runs the mma.sync kernels.
#pragma once
#include <compare>
#include <string>
#include <vector>

namespace dark::cuda::flash {

struct Sm90Config {
  int device = 0;
  bool backward = false;
  int kd = 0;  // the padded head dimension: 64, 128 or 256
  bool causal = false, windowed = false, masked = false;

  auto operator<=>(const Sm90Config&) const = default;
  // "backward, d 128, causal, window, key mask"
  std::string describe() const;
};

// The registers a thread of a Hopper kernel gets at launch (ptxas's count, read with
// cudaFuncGetAttributes) and the fewest its register split needs (0: it moves none).
struct KernelRegisters {
  std::string kernel;
  int registers, needed;
};
// Those of the kernels forward_sm90 / backward_sm90 launch for head dimension kd, on the
// current device (flash_attention_sm90*.cu).
std::vector<KernelRegisters> forward_sm90_registers(int kd);
std::vector<KernelRegisters> backward_sm90_registers(int kd);

// Whether this call of `config` may run the Hopper kernels. The caller has established that
// the build has them (sm90_built), the GPU is compute capability 9.0 and the rows are aligned.
bool sm90_allowed(const Sm90Config& config);

}  // namespace dark::cuda::flash
