// Preemption-safe stops: while a StopSignals is alive, SIGTERM and SIGINT do not end the
// process but set a flag that the training loop (and a sweep) reads between steps: the run
// then finishes its step, writes a checkpoint and exits with kStoppedBySignal. A second
// signal, more than a second after the first, has its default action (the process ends at
// once). One within that second counts as the same request: a scheduler that signals every
// process of a job reaches a sweep's points both directly and through the sweep.
//
// No handler runs on a computing thread: the two signals are blocked in the thread that
// creates the StopSignals (and so in every thread it starts later: OpenMP, MPI) and taken by
// a watcher thread with sigwait. A signal frame pushed while oneDNN's JIT GEMM kernels run
// corrupts the heap (they point rsp into the heap; uxlfoundation/oneDNN#4845, fixed in 3.11,
// reproduced here with Debian's libdnnl). Threads that existed before keep a handler that
// only sets the flag. Only process-directed signals (kill, Ctrl-C, a parent-death signal)
// reach the watcher. Children started with fork + exec must unblock the signals themselves.
#pragma once
#include <pthread.h>
#include <signal.h>

namespace dark::train {

// The exit code of a run (and a sweep) stopped by SIGTERM or SIGINT after saving its state:
// EX_TEMPFAIL of sysexits.h, "try again" (continue with --resume; re-run a sweep).
inline constexpr int kStoppedBySignal = 75;

class StopSignals {
 public:
  StopSignals();   // blocks the signals in this thread, starts the watcher (one at a time)
  // Stops the watcher and restores this thread's mask and the handlers; after a received
  // signal the two are ignored from then on instead (the process has saved and is ending).
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received (SIGTERM or SIGINT), or 0.
  static int received();

 private:
  sigset_t watched_{};   // SIGTERM and SIGINT, less any the process was started ignoring
  sigset_t old_mask_{};
  pthread_t watcher_{};
  int wake_ = 0;  // the signal that wakes the watcher to end it; 0 when there is none
};

}  // namespace dark::train
