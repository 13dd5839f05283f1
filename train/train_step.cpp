// One optimizer step (see train_step.h).
#include "train/train_step.h"

#include <chrono>
#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "nn/schedule.h"
#include "train/attention_state.h"

namespace dark::train {

StepScalars gradients_final(TrainingRun& run, const Tensor& loss_sum) {
  NoGradGuard no_grad;
  const Tensor grad_sq = run.params->grad_sq_norm().to(DType::f64);
  const std::vector<double> scalars = concat({reshape(loss_sum, {1}), reshape(grad_sq, {1})}, 0).to_vector<double>();
  return {scalars[0], std::sqrt(scalars[1])};
}

StepResult train_step(TrainingRun& run) {
  const RunConfig& c = run.config;
  const TrainingConfig& tc = c.training;
  set_feature_epochs(*run.model, run.redraw_intervals, run.step);  // redraws happen on optimizer steps, in training only
  const auto t0 = std::chrono::steady_clock::now();
  StepResult r;
  r.lr = nn::learning_rate_at(c.schedule, c.optimizer.lr, run.step, tc.steps);
  run.params->zero_grad();
  Tensor loss_sum;
  for (int micro = 0; micro < tc.grad_accum; ++micro) {
    const std::int64_t index = run.step * tc.grad_accum + micro;  // keys the batch and the dropout masks
    Tensor loss = run.model->loss(run.loader->batch(index), static_cast<std::uint64_t>(index));
    if (tc.grad_accum > 1) loss = mul_scalar(loss, 1.0 / tc.grad_accum);
    backward(loss);
    const Tensor value = loss.detach().to(DType::f64);
    loss_sum = loss_sum.defined() ? add(loss_sum, value) : value;
  }
  const StepScalars s = gradients_final(run, loss_sum);
  r.loss = s.loss;
  r.grad_norm = s.grad_norm;
  r.applied = std::isfinite(r.loss) && std::isfinite(r.grad_norm);
  if (r.applied) {
    const double factor = nn::clip_factor(r.grad_norm, c.optimizer.grad_clip);
    if (factor != 1.0) run.params->scale_grads(factor);
    run.optimizer->step(r.lr);
    run.consecutive_skips = 0;
  } else {
    ++run.consecutive_skips, ++run.skipped_total;
  }
  ++run.step;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace dark::train
