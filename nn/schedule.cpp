// Learning-rate schedules (see schedule.h).
#include "nn/schedule.h"

#include <algorithm>
#include <cmath>

namespace dark::nn {

double learning_rate_at(const ScheduleConfig& s, double base_lr, std::int64_t step, std::int64_t total_steps) {
  if (s.kind == ScheduleKind::constant) return base_lr;
  // Warmup: lr / warmup, 2 lr / warmup, ..., lr (the first step never uses lr = 0).
  if (step < s.warmup_steps) return base_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  const double span = std::max<double>(1.0, static_cast<double>(total_steps - s.warmup_steps - 1));
  const double progress = std::clamp(static_cast<double>(step - s.warmup_steps) / span, 0.0, 1.0);
  const double floor = base_lr * s.min_lr_ratio;
  if (s.kind == ScheduleKind::linear) return base_lr - (base_lr - floor) * progress;
  return floor + 0.5 * (base_lr - floor) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace dark::nn
