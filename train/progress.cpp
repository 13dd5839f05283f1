// Durations and progress bars (see progress.h).
#include "train/progress.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>

namespace dark::train {

std::string duration_text(double seconds) {
  const auto s = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%llds", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, s % 3600 / 60);
  return buf;
}

std::string progress_bar(std::int64_t done, std::int64_t total, int width) {
  const auto ratio = static_cast<double>(done) / static_cast<double>(std::max<std::int64_t>(total, 1));
  const int filled = std::clamp(static_cast<int>(ratio * width), 0, width);
  std::string bar(static_cast<std::size_t>(width) + 2, '.');
  bar.front() = '[';
  bar.back() = ']';
  std::fill_n(bar.begin() + 1, filled, '#');
  return bar;
}

ProgressLog::ProgressLog(std::string what, std::string unit, std::string units, std::int64_t total, double first_after,
                         double every, Clock clock)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      units_(std::move(units)),
      total_(total),
      first_after_(first_after),
      every_(every),
      clock_(clock ? std::move(clock) : Clock([] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
      })),
      start_(clock_()),
      next_(start_ + first_after) {}

std::string ProgressLog::update(std::int64_t done) {
  const double now = clock_(), elapsed = now - start_;
  const bool last = done >= total_;
  if (!(now >= next_ || (last && logged_)) || done <= 0) return "";
  logged_ = true;
  next_ = now + every_;
  const double per_unit = elapsed / static_cast<double>(done);
  char rate[64];
  if (per_unit >= 0.1) std::snprintf(rate, sizeof rate, "%.2f s/%s", per_unit, unit_.c_str());
  else std::snprintf(rate, sizeof rate, "%.1f %s/s", 1.0 / std::max(per_unit, 1e-9), units_.c_str());
  std::string line = what_ + ": " + unit_ + " " + std::to_string(done) + "/" + std::to_string(total_) + " " +
                     progress_bar(done, total_) + " | " + rate + " | " +
                     (last ? "done in " + duration_text(elapsed)
                           : "ETA " + duration_text(per_unit * static_cast<double>(total_ - done)));
  spdlog::info("{}", line);
  return line;
}

}  // namespace dark::train
