// Learning-rate schedules: constant, or linear warmup followed by cosine or linear decay
// to min_lr_ratio * lr at the last step. `step` counts optimizer steps from 0.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>
#include <utility>

#include "core/enum_names.h"

namespace dark::nn {

enum class ScheduleKind { cosine, linear, constant };

// The schedule section of a run config, owned here (the run's length is training.steps).
struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::cosine;  // decay after warm-up
  std::int64_t warmup_steps = 100;           // linear warm-up steps from 0 to the peak learning rate
  double min_lr_ratio = 0.1;                 // final learning rate as a fraction of the peak
};

// The learning rate of optimizer step `step` (0-based) of a run of `total_steps` steps.
double learning_rate_at(const ScheduleConfig& schedule, double base_lr, std::int64_t step, std::int64_t total_steps);

}  // namespace dark::nn

namespace dark {
template <>
struct EnumNames<nn::ScheduleKind> {
  static constexpr std::array<std::pair<nn::ScheduleKind, std::string_view>, 3> table{
      {{nn::ScheduleKind::cosine, "cosine"}, {nn::ScheduleKind::linear, "linear"}, {nn::ScheduleKind::constant, "constant"}}};
};
}  // namespace dark
