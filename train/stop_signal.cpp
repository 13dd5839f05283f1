// SIGTERM / SIGINT as a stop request (see stop_signal.h). The handler only touches
// lock-free atomics and calls async-signal-safe functions (clock_gettime, signal, raise).
#include "train/stop_signal.h"

#include <signal.h>
#include <time.h>

#include <atomic>
#include <cstdint>

#include "core/error.h"

namespace dark::train {

namespace {

std::atomic<int> g_signal{0};                 // the first signal, 0 before any
std::atomic<std::int64_t> g_first_ns{0};      // when it came (CLOCK_MONOTONIC)
constexpr std::int64_t kSameRequestNs = 1'000'000'000;
constexpr int kSignals[] = {SIGTERM, SIGINT};
struct sigaction g_previous[2];
std::atomic<bool> g_installed{false};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<std::int64_t>::is_always_lock_free);

std::int64_t now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

void on_signal(int sig) {
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, sig)) {
    g_first_ns.store(now_ns());
    return;
  }
  if (now_ns() - g_first_ns.load() < kSameRequestNs) return;  // the same request, delivered twice
  ::signal(sig, SIG_DFL);  // a second request: end now, as if no handler were installed
  ::raise(sig);
}

}  // namespace

StopSignals::StopSignals() {
  DARK_CHECK(!g_installed.exchange(true), "StopSignals: already installed in this process");
  g_signal.store(0);
  struct sigaction action {};
  action.sa_handler = on_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < 2; ++i) {
    DARK_CHECK(::sigaction(kSignals[i], nullptr, &g_previous[i]) == 0, "sigaction failed for signal ", kSignals[i]);
    // A signal the process was started ignoring (nohup, `cmd &` in a script) stays ignored.
    if (g_previous[i].sa_handler != SIG_IGN) ::sigaction(kSignals[i], &action, nullptr);
  }
}

StopSignals::~StopSignals() {
  for (int i = 0; i < 2; ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);
  g_installed.store(false);
}

int StopSignals::received() { return g_signal.load(); }

}  // namespace dark::train
