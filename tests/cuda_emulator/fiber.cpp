// Fibers of the CUDA emulator (see fiber.h): stacks from mmap with a guard page, and the
// x86-64 context switch in a few lines of assembly.
#include "cuda_emulator/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if !defined(__x86_64__)
#error "the CUDA emulator's context switch is written for x86-64"
#endif

// dark_emu_switch(save, to): pushes the callee-saved registers on the current stack, stores
// the stack pointer in *save, loads `to` and pops the registers saved there, and returns into
// the other context. dark_emu_start: the first return of a new fiber lands here, with the
// Fiber* in r12 and a 16-byte aligned stack; it calls Fiber::entry, which never returns.
extern "C" void dark_emu_switch(void** save, void* to);
extern "C" void dark_emu_start();
extern "C" void dark_emu_fiber_entry(void* fiber) { dark::cuda_emu::Fiber::entry(static_cast<dark::cuda_emu::Fiber*>(fiber)); }

asm(R"(
  .text
  .globl dark_emu_switch
  .hidden dark_emu_switch
  .type dark_emu_switch, @function
dark_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size dark_emu_switch, .-dark_emu_switch

  .globl dark_emu_start
  .hidden dark_emu_start
  .type dark_emu_start, @function
dark_emu_start:
  movq %r12, %rdi
  call dark_emu_fiber_entry
  ud2
  .size dark_emu_start, .-dark_emu_start
)");

namespace dark::cuda_emu {
namespace {

std::size_t page_size() {
  static const std::size_t size = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

}  // namespace

FiberStack::FiberStack() {
  const std::size_t guard = page_size();
  void* p = mmap(nullptr, guard + kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "darkformer CUDA emulator: cannot map a %zu-byte fiber stack\n", kStackBytes);
    std::abort();
  }
  mapping_ = static_cast<char*>(p);
  mprotect(mapping_, guard, PROT_NONE);  // stacks grow down: the guard sits below the stack
  base_ = mapping_ + guard;
}

FiberStack::~FiberStack() { munmap(mapping_, page_size() + kStackBytes); }

Fiber::Fiber(FiberStack* stack, std::function<void()> body) : stack_(stack), body_(std::move(body)) {
  // The frame dark_emu_switch pops: [csr][r15][r14][r13][r12 = this][rbx][rbp][return = start].
  auto top = reinterpret_cast<std::uintptr_t>(stack->top()) & ~std::uintptr_t{15};
  auto* slots = reinterpret_cast<std::uint64_t*>(top);
  slots[-1] = reinterpret_cast<std::uint64_t>(&dark_emu_start);  // after `ret`, rsp = top (16-aligned)
  slots[-2] = 0;                                                  // rbp
  slots[-3] = 0;                                                  // rbx
  slots[-4] = reinterpret_cast<std::uint64_t>(this);              // r12
  slots[-5] = slots[-6] = slots[-7] = 0;                          // r13, r14, r15
  const std::uint32_t mxcsr = 0x1f80;                             // round to nearest, exceptions masked
  const std::uint16_t fpu_control = 0x037f;
  std::uint64_t csr = 0;
  std::memcpy(&csr, &mxcsr, 4);
  std::memcpy(reinterpret_cast<char*>(&csr) + 4, &fpu_control, 2);
  slots[-8] = csr;
  fiber_sp_ = &slots[-8];
}

void Fiber::resume() {
  dark_emu_switch(&scheduler_sp_, fiber_sp_);
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void Fiber::yield() { dark_emu_switch(&fiber_sp_, scheduler_sp_); }

void Fiber::entry(Fiber* self) {
  try {
    self->body_();
  } catch (...) {
    self->error_ = std::current_exception();
  }
  self->finished_ = true;
  self->body_ = nullptr;
  dark_emu_switch(&self->fiber_sp_, self->scheduler_sp_);
  std::abort();  // a finished fiber is never resumed
}

}  // namespace dark::cuda_emu
