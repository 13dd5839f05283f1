// Preemption-safe stops: while a StopSignals is alive, SIGTERM and SIGINT do not end the
// process but set a flag that the training loop (and a sweep) reads between steps: the run
// then finishes its step, writes a checkpoint and exits with kStoppedBySignal. A second
// signal, more than a second after the first, has its default action (the process ends at
// once). One within that second counts as the same request: a scheduler that signals every
// process of a job reaches a sweep's points both directly and through the sweep.
#pragma once

namespace dark::train {

// The exit code of a run (and a sweep) stopped by SIGTERM or SIGINT after saving its state:
// EX_TEMPFAIL of sysexits.h, "try again" (continue with --resume; re-run a sweep).
inline constexpr int kStoppedBySignal = 75;

class StopSignals {
 public:
  StopSignals();   // installs the handlers (SA_RESTART: system calls go on)
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received (SIGTERM or SIGINT), or 0.
  static int received();
};

}  // namespace dark::train
