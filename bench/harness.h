// A small timing harness for darkformer_bench: every case times our op against a peer
// (raw oneDNN, memcpy) on the same data and reports the ratio of their throughputs.
//
// Invariants: each side is warmed up, then timed in R repetitions of N inner calls, N
// chosen so one repetition lasts at least min_rep_seconds; ours and the peer alternate
// repetition by repetition, so background load hits both sides alike. Reported times are
// per call: the median over repetitions, plus the fastest and slowest repetition.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/median.h"

namespace dark::bench {

struct Options {
  int reps = 7;                  // timed repetitions per side
  double min_rep_seconds = 0.05; // each repetition runs at least this long
  double warmup_seconds = 0.2;   // untimed calls before calibration (at least 2 calls)
};

// Per-call times of one side of a case, in seconds.
struct Stats {
  double median_s = 0, min_s = 0, max_s = 0;
  int reps = 0;
  std::int64_t inner = 0;  // calls per repetition
};

// One finished case. `work_*` is FLOPs or bytes per call, so throughput = work / time.
struct Row {
  std::string name;
  std::string peer_name;  // what we compare against, e.g. "dnnl_sgemm"
  std::string unit;       // "GFLOP/s" or "GB/s"
  double work_ours = 0, work_peer = 0;
  Stats ours, peer;
  double target = 0;  // pass when ratio >= target
  std::string error;  // set when the case threw or its validation failed

  double ours_rate() const { return ours.median_s > 0 ? work_ours / ours.median_s * 1e-9 : 0; }
  double peer_rate() const { return peer.median_s > 0 ? work_peer / peer.median_s * 1e-9 : 0; }
  double ratio() const { return peer_rate() > 0 ? ours_rate() / peer_rate() : 0; }
  bool passed() const { return error.empty() && ratio() >= target; }
};

// A registered case: `run` builds its inputs, validates ours against a reference and
// times both sides. Inputs are built only when the case is selected.
struct Case {
  std::string name;
  std::function<Row(const Options&)> run;
};

// Each bench_*.cpp appends its cases here (called from bench_main.cpp).
void add_matmul_cases(std::vector<Case>& cases);
void add_elementwise_cases(std::vector<Case>& cases);

// Keeps the compiler from proving a buffer unused (e.g. a memcpy destination).
inline void escape(void* p) { asm volatile("" : : "g"(p) : "memory"); }

namespace detail {
using Clock = std::chrono::steady_clock;

template <class Fn>
double seconds_for(Fn& fn, std::int64_t calls) {
  const auto start = Clock::now();
  for (std::int64_t i = 0; i < calls; ++i) fn();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Warms fn up and returns the inner-iteration count for one repetition. Uses the fastest
// per-call estimate seen, so a stall during warm-up (another process taking the core)
// makes repetitions longer, never shorter than min_rep_seconds.
template <class Fn>
std::int64_t warm_up_and_calibrate(Fn& fn, const Options& opt) {
  std::int64_t calls = 0;
  double elapsed = 0, fastest = 1e300;
  while (calls < 2 || elapsed < opt.warmup_seconds) {
    const double t = seconds_for(fn, 1);
    elapsed += t;
    fastest = std::min(fastest, t);
    ++calls;
  }
  auto inner_for = [&](double per_call) {
    return std::max<std::int64_t>(
        1, static_cast<std::int64_t>(std::ceil(opt.min_rep_seconds / std::max(per_call, 1e-9))));
  };
  // Refine with a batch near the target length: single calls overstate short ops.
  const std::int64_t trial = inner_for(fastest);
  const double batched = seconds_for(fn, trial) / static_cast<double>(trial);
  return inner_for(std::min(fastest, batched));
}

inline Stats summarize(std::vector<double> per_call, std::int64_t inner) {
  std::sort(per_call.begin(), per_call.end());
  const std::size_t n = per_call.size();
  Stats s;
  s.median_s = dark::median(per_call);
  s.min_s = per_call.front();
  s.max_s = per_call.back();
  s.reps = static_cast<int>(n);
  s.inner = inner;
  return s;
}
}  // namespace detail

// Times `ours` and `peer` in alternating repetitions; fills row.ours and row.peer.
template <class OursFn, class PeerFn>
void measure_pair(Row& row, OursFn&& ours, PeerFn&& peer, const Options& opt) {
  const std::int64_t inner_ours = detail::warm_up_and_calibrate(ours, opt);
  const std::int64_t inner_peer = detail::warm_up_and_calibrate(peer, opt);
  std::vector<double> t_ours, t_peer;
  auto time_ours = [&] {
    t_ours.push_back(detail::seconds_for(ours, inner_ours) / static_cast<double>(inner_ours));
  };
  auto time_peer = [&] {
    t_peer.push_back(detail::seconds_for(peer, inner_peer) / static_cast<double>(inner_peer));
  };
  for (int r = 0; r < opt.reps; ++r) {  // who goes first alternates too
    if (r % 2 == 0) {
      time_ours();
      time_peer();
    } else {
      time_peer();
      time_ours();
    }
  }
  row.ours = detail::summarize(std::move(t_ours), inner_ours);
  row.peer = detail::summarize(std::move(t_peer), inner_peer);
}

}  // namespace dark::bench
