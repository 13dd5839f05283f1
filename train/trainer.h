// The training loop of `darkformer train`: set-up (train/training_run.h), one optimizer step
// at a time (train/train_step.h), evaluation every N steps (train/evaluate.h),
// metrics.jsonl, checkpoints and bit-exact resume, non-finite step skipping, and the end of
// a run (final evaluation and checkpoint, stability.json, a sample, the recall tasks).
//
// Run folder (output.dir):
//   config.json        the fully resolved config (written at the start of a fresh run)
//   metrics.jsonl      one JSON object per logged step / evaluation
//   checkpoints/       step_NNNNNNNN/ (model.safetensors, optimizer.safetensors, state.json)
//   sample.txt         the text generated at the end
//   stability.json     loss spikes, divergence, final/best validation (train/metrics/stability.h)
//   passkey.json       passkey retrieval at the end, with evaluation.passkey (train/recall_evaluation.h)
//   copy.json          the copy task at the end, with evaluation.copy
//   .lock              the writer's "pid host" while a run writes the folder (train/run_lock.h)
//
// SIGTERM and SIGINT stop a run between two steps (train/stop_signal.h): it finishes the step
// it is in (and the evaluation or checkpoint due after it), checkpoints that step, logs
// "stopped by signal at step N; continue with --resume" and returns with stopped_by_signal;
// `darkformer train` then exits with kStoppedBySignal (75). Under mpirun the ranks agree on
// the stop each step (the flag is reduced with max), so a signal that reached one rank
// stops them all at the same step.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "nn/model.h"
#include "train/config.h"
#include "train/evaluate.h"
#include "train/training_run.h"

namespace dark::train {

struct TrainOptions {
  bool resume = false;  // continue from the run folder's latest checkpoint
  // Called before each optimizer step (0-based) with the model: for probes, custom logging
  // and fault injection in tests. Runs outside the tape.
  std::function<void(std::int64_t step, nn::CausalLM& model)> before_step;
};

struct TrainResult {
  std::int64_t steps = 0;  // optimizer steps taken (the diverging one included when stability.stop_on_divergence ended the run)
  double final_train_loss = 0;
  EvalMetrics final_eval;
  std::string run_dir;
  bool stopped_by_signal = false;  // SIGTERM/SIGINT: checkpointed at `steps`, not finished
};

// Runs a whole training run (or up to a stop signal). Throws dark::Error on bad config, data, or checkpoints; a
// fresh run refuses to start in a run folder that already holds checkpoints.
TrainResult train(RunConfig config, const TrainOptions& options);

}  // namespace dark::train
