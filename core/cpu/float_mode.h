// Flush-to-zero for subnormal floats, on the calling thread and on OpenMP's thread pool.
//
// A float below 2^-126 (1.2e-38) in magnitude is subnormal, and x86 CPUs compute with one in
// microcode assists of 100 cycles and more an operation. Training makes them in quantities: a
// small model's exp-features and Adam moments of rarely used rows drift below 2^-126, and
// once they do, every step pays. Measured on MQAR at 256 tokens (docs/long-context.md), a step
// went from 0.27 s to 0.9-1.5 s after step 2200; with the flags below set, 0.27 s throughout and
// the same losses to 4 decimals. GPUs flush subnormals in their fast paths anyway; PyTorch
// offers the same switch as torch.set_flush_denormal.
//
// x86-64: MXCSR's FTZ (results that would be subnormal become 0) and DAZ (subnormal inputs
// are read as 0). AArch64: FPCR.FZ, which does both. Elsewhere nothing is set and
// flush_denormals_supported() is false.
#pragma once

namespace dark::cpu {

// Whether this build's CPU architecture has the control (x86-64 or AArch64).
bool flush_denormals_supported();

// Whether subnormals are flushed on the calling thread now.
bool flushing_denormals();

// Sets flushing on (or off) for the calling thread and every thread of OpenMP's pool (threads
// created later inherit the creating thread's mode), and restores each thread's previous mode
// when it ends. Nesting scopes is fine; they must end in reverse order, on the thread that
// made them, outside any parallel region.
class FlushDenormalsScope {
 public:
  explicit FlushDenormalsScope(bool flush);
  ~FlushDenormalsScope();
  FlushDenormalsScope(const FlushDenormalsScope&) = delete;
  FlushDenormalsScope& operator=(const FlushDenormalsScope&) = delete;

 private:
  bool previous_;
};

}  // namespace dark::cpu
