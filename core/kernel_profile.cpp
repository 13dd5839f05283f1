// Kernel profiles (see kernel_profile.h).
#include "core/kernel_profile.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "core/backend.h"
#include "core/error.h"

namespace dark {
namespace {

struct Timed {
  const char* pass;
  const char* kernel;
  DeviceType device;
  profile_detail::Work work;
  void* start;
  void* end;
};

std::mutex& timed_mutex() {
  static std::mutex m;
  return m;
}
std::vector<Timed>& timed() {  // the bracketed calls of the live profile, in dispatch order
  static std::vector<Timed> list;
  return list;
}

thread_local const char* current_pass = "";
thread_local int dispatch_depth = 0;  // > 0 inside a timed kernel

}  // namespace

KernelProfile::KernelProfile() {
  bool expected = false;
  DARK_CHECK(active_.compare_exchange_strong(expected, true), "KernelProfile: another profile is already running");
}

KernelProfile::~KernelProfile() {
  if (!finished_) finish();
}

std::vector<KernelProfile::Row> KernelProfile::finish() {
  DARK_CHECK(!finished_, "KernelProfile: finished twice");
  finished_ = true;
  active_.store(false, std::memory_order_relaxed);
  std::vector<Timed> calls;
  {
    std::lock_guard lock(timed_mutex());
    calls.swap(timed());
  }
  std::map<std::tuple<std::string, std::string, DeviceType>, Row> sums;
  for (const Timed& t : calls) {
    const DeviceBackend& backend = backend_for(t.device);
    const double ms = backend.elapsed_ms(t.start, t.end);
    backend.release_timing_event(t.start);
    backend.release_timing_event(t.end);
    Row& row = sums[{t.pass, t.kernel, t.device}];
    row.pass = t.pass, row.kernel = t.kernel, row.device = t.device;
    ++row.calls;
    row.ms += ms;
    row.bytes += t.work.bytes;
    row.flops += t.work.flops;
  }
  std::vector<Row> rows;
  for (auto& [key, row] : sums) rows.push_back(std::move(row));
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.ms > b.ms; });
  return rows;
}

ProfilePass::ProfilePass(const char* name) : previous_(current_pass) { current_pass = name; }
ProfilePass::~ProfilePass() { current_pass = previous_; }

namespace profile_detail {

KernelTimer::KernelTimer(const char* kernel, DeviceType device, const Work& work)
    : kernel_(kernel), device_(device), work_(work) {
  if (dispatch_depth++ > 0) return;
  start_ = backend_for(device).record_timing_event();
}

KernelTimer::~KernelTimer() {
  --dispatch_depth;
  if (start_ == nullptr) return;
  const DeviceBackend& backend = backend_for(device_);
  void* end = backend.record_timing_event();
  std::lock_guard lock(timed_mutex());
  if (!KernelProfile::active()) {  // finished while this kernel ran: not part of the profile
    backend.release_timing_event(start_);
    backend.release_timing_event(end);
    return;
  }
  timed().push_back({current_pass, kernel_, device_, work_, start_, end});
}

}  // namespace profile_detail
}  // namespace dark
