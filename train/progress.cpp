// Durations and progress bars (see progress.h).
#include "train/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

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

}  // namespace dark::train
