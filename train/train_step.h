// One optimizer step of a training run, in the order it happens:
//   1. the feature epoch of this step (random-feature redraws) and its learning rate;
//   2. micro-batches: forward, loss, backward, gradients accumulating in the flat buffer (with
//      data parallelism, the last backward all-reduces bucket after bucket as it goes);
//   3. gradients_final(): the one point where the step's gradients are complete. Data
//      parallelism reduces them across ranks here; the step's two scalars (loss, gradient
//      norm) are read back here in one transfer, which is where the host waits for a device;
//   4. a non-finite loss or gradient skips the update; otherwise clipping and the update.
#pragma once
#include <cstdint>

#include "core/deferred_checks.h"
#include "core/tensor.h"
#include "train/training_run.h"

namespace dark::train {

struct StepResult {
  double loss = 0;       // the step's loss (mean over its micro-batches)
  double grad_norm = 0;  // global L2 norm of the gradients, before clipping
  double lr = 0;         // the learning rate used
  double seconds = 0;    // wall time of the step
  double comm_wait_seconds = 0;  // data parallelism: waiting for the gradients' reduction after backward
  bool applied = false;  // false when the loss or the gradient norm was not finite: no update
  std::size_t peak_bytes = 0;  // the most memory live tensors held on the model's device during the step
};

// Runs optimizer step run.step (0-based), then counts it: run.step + 1, and the skip counters.
StepResult train_step(TrainingRun& run);

// The step's loss and gradient norm, read back together once the gradients are final.
struct StepScalars {
  double loss = 0, grad_norm = 0;
  double comm_wait_seconds = 0;
};
// `loss_sum`: the float64 sum of the micro-batches' (scaled) losses, on the model's device.
// With data parallelism it completes the gradients' reduction and sums the loss over ranks.
// `checks`: the step's deferred index checks, read back with the scalars (their first
// failure is thrown).
StepScalars gradients_final(TrainingRun& run, const Tensor& loss_sum, const DeferredChecks* checks = nullptr);

}  // namespace dark::train
