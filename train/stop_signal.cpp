// SIGTERM / SIGINT as a stop request (see stop_signal.h).
#include "train/stop_signal.h"

#include <time.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace dark::train {

namespace {

std::atomic<int> g_signal{0};             // the first signal, 0 before any
std::atomic<std::int64_t> g_first_ns{0};  // when it came (CLOCK_MONOTONIC)
std::atomic<bool> g_installed{false};
std::atomic<bool> g_stopping{false};      // the watcher is being stopped
constexpr std::int64_t kSameRequestNs = 1'000'000'000;
constexpr int kSignals[] = {SIGTERM, SIGINT};
struct sigaction g_previous[2];
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<std::int64_t>::is_always_lock_free);

std::int64_t now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

// True for a second request (the caller then ends the process); async-signal-safe.
bool record(int sig) {
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, sig)) {
    g_first_ns.store(now_ns());
    return false;
  }
  return now_ns() - g_first_ns.load() >= kSameRequestNs;
}

// Ends the process by `sig`'s default action, from a thread where it is unblocked.
void die_by(int sig) {
  ::signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  ::pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  ::raise(sig);
}

// For threads that existed before the StopSignals (their mask is their own).
void on_signal(int sig) {
  if (record(sig)) die_by(sig);
}

void* watch(void* arg) {
  const sigset_t* watched = static_cast<const sigset_t*>(arg);
  for (;;) {
    int sig = 0;
    if (::sigwait(watched, &sig) != 0) continue;
    if (g_stopping.load()) return nullptr;
    if (record(sig)) die_by(sig);
  }
}

}  // namespace

StopSignals::StopSignals() {
  DARK_CHECK(!g_installed.exchange(true), "StopSignals: already installed in this process");
  g_signal.store(0);
  g_stopping.store(false);
  struct sigaction action {};
  action.sa_handler = on_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigemptyset(&watched_);
  for (int i = 0; i < 2; ++i) {
    DARK_CHECK(::sigaction(kSignals[i], nullptr, &g_previous[i]) == 0, "sigaction failed for signal ", kSignals[i]);
    // A signal the process was started ignoring (nohup, `cmd &` in a script) stays ignored.
    if (g_previous[i].sa_handler == SIG_IGN) continue;
    ::sigaction(kSignals[i], &action, nullptr);
    sigaddset(&watched_, kSignals[i]);
  }
  ::pthread_sigmask(SIG_BLOCK, &watched_, &old_mask_);
  wake_ = sigismember(&watched_, SIGTERM) ? SIGTERM : sigismember(&watched_, SIGINT) ? SIGINT : 0;
  if (!wake_) return;  // both ignored: nothing to watch
  const int rc = ::pthread_create(&watcher_, nullptr, watch, &watched_);
  DARK_CHECK(rc == 0, "StopSignals: cannot start the signal watcher thread: ", std::strerror(rc));
}

StopSignals::~StopSignals() {
  g_stopping.store(true);
  if (wake_) {
    ::pthread_kill(watcher_, wake_);  // wakes its sigwait (thread-directed: it takes it)
    ::pthread_join(watcher_, nullptr);
  }
  // After a stop the state is saved and the process is on its way out: later copies of the
  // request are ignored rather than killing it on the way (a parent-death signal comes once
  // per thread of the dying parent, as the kernel hands the child from thread to thread).
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  for (int i = 0; i < 2; ++i) ::sigaction(kSignals[i], g_signal.load() ? &ignore : &g_previous[i], nullptr);
  ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  g_installed.store(false);
}

int StopSignals::received() { return g_signal.load(); }

}  // namespace dark::train
