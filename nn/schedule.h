// Learning-rate schedules: constant, or linear warmup followed by cosine or linear decay
// to min_lr_ratio * lr at the last step. `step` counts optimizer steps from 0.
#pragma once
#include <cstdint>
#include <string>

namespace dark::nn {

struct ScheduleConfig {
  std::string kind = "cosine";  // constant | cosine | linear
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;
  double min_lr_ratio = 0.1;
};

double learning_rate_at(const ScheduleConfig& schedule, double base_lr, std::int64_t step);

}  // namespace dark::nn
