#include "core/cpu/float_mode.h"

#include <omp.h>

#include <cstdint>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace dark::cpu {
namespace {

#if defined(__x86_64__) || defined(_M_X64)
constexpr unsigned kFlushToZero = 0x8000;      // MXCSR.FTZ
constexpr unsigned kDenormalsAreZero = 0x0040;  // MXCSR.DAZ
constexpr unsigned kBoth = kFlushToZero | kDenormalsAreZero;

// Each thread's mode is all or nothing: "flushing" means both bits are set.
bool thread_flushing() { return (_mm_getcsr() & kBoth) == kBoth; }
void set_thread_flushing(bool flush) { _mm_setcsr(flush ? (_mm_getcsr() | kBoth) : (_mm_getcsr() & ~kBoth)); }
#elif defined(__aarch64__)
constexpr std::uint64_t kFlushToZero = std::uint64_t{1} << 24;  // FPCR.FZ

std::uint64_t read_fpcr() {
  std::uint64_t fpcr;
  asm volatile("mrs %0, fpcr" : "=r"(fpcr));
  return fpcr;
}
bool thread_flushing() { return (read_fpcr() & kFlushToZero) != 0; }
void set_thread_flushing(bool flush) {
  const std::uint64_t fpcr = flush ? (read_fpcr() | kFlushToZero) : (read_fpcr() & ~kFlushToZero);
  asm volatile("msr fpcr, %0" : : "r"(fpcr));
}
#else
bool thread_flushing() { return false; }
void set_thread_flushing(bool) {}
#endif

// The calling thread and every thread of the pool: a parallel region with the default team
// size runs on all of them (OMP_DYNAMIC is off unless a user turns it on, and then the
// threads left out keep their mode; the flag is a speed setting, not a correctness one).
void set_flushing_everywhere(bool flush) {
  set_thread_flushing(flush);
#pragma omp parallel
  set_thread_flushing(flush);
}

}  // namespace

bool flush_denormals_supported() {
#if defined(__x86_64__) || defined(_M_X64) || defined(__aarch64__)
  return true;
#else
  return false;
#endif
}

bool flushing_denormals() { return thread_flushing(); }

FlushDenormalsScope::FlushDenormalsScope(bool flush) : previous_(thread_flushing()) {
  if (flush != previous_) set_flushing_everywhere(flush);
}

FlushDenormalsScope::~FlushDenormalsScope() {
  if (thread_flushing() != previous_) set_flushing_everywhere(previous_);
}

}  // namespace dark::cpu
