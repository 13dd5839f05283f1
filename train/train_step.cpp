// One optimizer step (see train_step.h).
#include "train/train_step.h"

#include <chrono>
#include <cmath>
#include <optional>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/deferred_checks.h"
#include "core/kernel_profile.h"
#include "nn/schedule.h"
#include "train/attention_state.h"
#include "train/data_parallel.h"
#include "train/step_graph.h"

namespace dark::train {

StepScalars gradients_final(TrainingRun& run, const Tensor& loss_sum, const DeferredChecks* checks) {
  NoGradGuard no_grad;
  StepScalars s;
  Tensor grad_sq;
  if (run.parallel) {
    s.comm_wait_seconds = run.parallel->finish_gradients();
    run.parallel->sum(loss_sum);  // every rank then holds the global batch's loss
    grad_sq = run.parallel->grad_sq_norm();
  } else {
    grad_sq = run.params->grad_sq_norm();
  }
  // The one read-back of the step: loss, squared gradient norm and the verdicts of the index
  // checks the step's kernels deferred.
  std::vector<Tensor> parts = {reshape(loss_sum, {1}), reshape(grad_sq.to(DType::f64), {1})};
  const Tensor verdicts = checks ? checks->verdicts() : Tensor();
  if (verdicts.defined()) parts.push_back(verdicts);
  const std::vector<double> scalars = concat(parts, 0).to_vector<double>();
  if (checks) checks->raise(std::vector<double>(scalars.begin() + 2, scalars.end()));
  s.loss = scalars[0];
  s.grad_norm = std::sqrt(scalars[1]);
  return s;
}

namespace {

// Forward and backward of the step's micro-batches (`batches`, their dropout masks keyed by
// `dropout`), gradients accumulating in the flat buffer: the float64 sum of their scaled losses.
Tensor accumulate_gradients(TrainingRun& run, const std::vector<Tensor>& batches,
                            const std::vector<nn::DropoutKey>& dropout) {
  const TrainingConfig& tc = run.config.training;
  const int world = run.parallel ? run.parallel->world_size() : 1;
  // The gradients summed over the micro-batches of every rank are the mean over the global batch.
  const int parts = tc.grad_accum * world;
  Tensor loss_sum;
  // bf16: every weight cast in one kernel for all micro-batches, not one per weight and use.
  auto weight_copies = tc.precision == Precision::bf16 ? run.params->cast_values(DType::bf16) : nullptr;
  for (int micro = 0; micro < tc.grad_accum; ++micro) {
    if (run.parallel && micro == tc.grad_accum - 1) run.parallel->arm();  // only the last backward communicates
    Tensor loss = run.model->loss(batches[micro], dropout[micro]);
    if (parts > 1) loss = mul_scalar(loss, 1.0 / parts);
    backward(loss);
    const Tensor value = loss.detach().to(DType::f64);
    loss_sum = loss_sum.defined() ? add(loss_sum, value) : value;
  }
  return loss_sum;  // weight_copies go here, before the update changes the values
}

}  // namespace

StepResult train_step(TrainingRun& run) {
  const RunConfig& c = run.config;
  const TrainingConfig& tc = c.training;
  set_feature_epochs(*run.model, run.redraw_intervals, run.step);  // redraws happen on optimizer steps, in training only
  const auto t0 = std::chrono::steady_clock::now();
  CachingAllocator& memory = allocator_for(run.device);
  memory.reset_peak();
  StepResult r;
  r.lr = nn::learning_rate_at(c.schedule, c.optimizer.lr, run.step, tc.steps);
  run.params->zero_grad();
  const int rank = run.parallel ? run.parallel->rank() : 0, world = run.parallel ? run.parallel->world_size() : 1;
  std::vector<std::uint64_t> indices;
  std::vector<Tensor> batches;
  for (int micro = 0; micro < tc.grad_accum; ++micro) {
    // Keys the batch and the dropout masks (which so differ between ranks).
    const std::int64_t index = micro_batch_index(run.step, rank, world, tc.grad_accum, micro);
    indices.push_back(static_cast<std::uint64_t>(index));
    batches.push_back(run.loader->batch(index));
  }
  Tensor loss_sum;
  const DeferredChecks* checks = nullptr;
  std::optional<DeferredChecks> eager_checks;
  bool launched_graph = false;
  if (run.step_graph) {
    const std::vector<std::int64_t> epochs = redrawing_feature_epochs(*run.model);
    launched_graph = run.step_graph->applies(epochs, attention_stats_requested(*run.model) || KernelProfile::active());
    if (launched_graph) {
      loss_sum = run.step_graph->launch(
          batches, indices, epochs, [&](const std::vector<Tensor>& inputs, const std::vector<nn::DropoutKey>& dropout) {
            return accumulate_gradients(run, inputs, dropout);
          });
      checks = &run.step_graph->checks();
    } else {
      run.step_graph->eager_step_ran(epochs);
    }
  }
  if (!launched_graph) {
    checks = &eager_checks.emplace(run.device);  // index checks wait for the step's one read-back
    loss_sum = accumulate_gradients(run, batches, host_dropout_keys(indices));
  }
  const StepScalars s = gradients_final(run, loss_sum, checks);
  r.loss = s.loss;
  r.grad_norm = s.grad_norm;
  r.comm_wait_seconds = s.comm_wait_seconds;
  r.applied = std::isfinite(r.loss) && std::isfinite(r.grad_norm);
  if (r.applied) {
    const double factor = nn::clip_factor(r.grad_norm, c.optimizer.grad_clip);
    if (factor != 1.0) run.params->scale_grads(factor);
    run.optimizer->step(r.lr);
    if (run.parallel) run.parallel->after_update();
    run.consecutive_skips = 0;
  } else {
    ++run.consecutive_skips, ++run.skipped_total;
  }
  ++run.step;
  r.peak_bytes = memory.stats().peak_bytes_in_use;
  // A launched graph allocates nothing: its intermediates are its pool's blocks, all of which
  // it may use during the step (an upper bound: the few it keeps live count twice).
  if (launched_graph) r.peak_bytes += run.step_graph->memory_bytes();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace dark::train
