// Fibers for the CUDA emulator: each emulated GPU thread of a block runs on its own small
// stack, and switches back to the block's scheduler when it waits at a barrier
// (__syncthreads, a warp shuffle, mma) or finishes. Switching saves only the callee-saved
// registers (x86-64 System V: rbx, rbp, r12-r15, rsp, MXCSR and the x87 control word), so
// a switch costs a few nanoseconds and no system call. Everything runs on the one host
// thread that launched the kernel: no data races, and the order of a block's threads is
// fixed, so an emulated kernel gives the same bits on every run. Not for sanitizer builds
// (AddressSanitizer does not know these stacks; CMake leaves the emulator out there).
#pragma once
#include <cstddef>
#include <exception>
#include <functional>

namespace dark::cuda_emu {

// A stack of kStackBytes with a guard page below it (an overflow faults instead of
// corrupting a neighbour), from a pool that keeps freed stacks for the next fiber.
class FiberStack {
 public:
  static constexpr std::size_t kStackBytes = 256 * 1024;  // pages are committed only when touched
  FiberStack();
  ~FiberStack();
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;
  char* top() const { return base_ + kStackBytes; }
  char* bottom() const { return base_; }

 private:
  char* mapping_ = nullptr;  // guard page + stack
  char* base_ = nullptr;
};

// One fiber: runs `body` on its stack when first resumed; resume() returns when the body
// yields or finishes. An exception escaping the body is kept and rethrown by resume().
class Fiber {
 public:
  Fiber(FiberStack* stack, std::function<void()> body);
  // Runs the fiber until it yields or finishes (called from the scheduler).
  void resume();
  // Returns to the scheduler (called from inside the fiber).
  void yield();
  bool finished() const { return finished_; }
  FiberStack* stack() const { return stack_; }

  // Entered on the fiber's own stack (by the start trampoline): not for direct use.
  static void entry(Fiber* self);

 private:
  FiberStack* stack_;
  std::function<void()> body_;
  void* fiber_sp_ = nullptr;      // saved stack pointer of the fiber while it is suspended
  void* scheduler_sp_ = nullptr;  // saved stack pointer of the scheduler while the fiber runs
  bool finished_ = false;
  std::exception_ptr error_;
};

}  // namespace dark::cuda_emu
