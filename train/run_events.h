// A run's TensorBoard event file (formats/tensorboard_events.h), written by rank 0 beside
// metrics.jsonl when output.tensorboard is on (the default), so that
// `tensorboard --logdir runs` shows every run and `--logdir runs/experiments/NAME` overlays a
// sweep's points (each point is a run folder):
// - every number of every metrics.jsonl line as a scalar at the line's step, tagged with its
//   key (nested keys joined by "/": redraw/held_out_loss_after, attention_stats/3/sq_norm_p99,
//   eval_by_position/1K-4K/loss, eval_ablation/window_only/by_position/4K+/loss;
//   true / false as 1 / 0), so the event file and metrics.jsonl say the same;
// - the resolved config as text at step 0, the sample as text at the last step;
// - an attention transfer's transfer.json (per layer: the errors before and after, mean and
//   median; the loss at the swap; its time) as scalars at step 0, tagged transfer/<its keys>;
// - the spikes and the divergence the stability analysis finds (see stability());
// - a resumed run opens a new file with a restart at the step it continues from, which
//   makes TensorBoard drop the earlier file's later steps (metrics.jsonl drops them too).
// A plot never ends a run: when the file cannot be opened or a write fails (a full disk, a
// removed mount), RunEvents logs one warning with the cause and writes no more events for the
// rest of the run; metrics.jsonl still has every number. Checkpoints stay strict.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "train/formats/tensorboard_events.h"
#include "train/metrics/stability.h"
#include "train/training_run.h"

namespace dark::train {

class RunEvents {
 public:
  // Opens the run's event file (rank 0 with output.tensorboard; otherwise writes nothing).
  explicit RunEvents(const TrainingRun& run);
  // Writes to `writer` (tests: one whose writes are made to fail).
  explicit RunEvents(formats::EventFileWriter writer);
  // Whether events are still being written (false: off, or given up after a failure).
  bool writing() const { return writer_.has_value(); }
  // One metrics.jsonl line (it has "step").
  void line(const nlohmann::json& line);
  // A text at `step` (the sample).
  void text(const std::string& tag, std::int64_t step, const std::string& markdown);
  // What the stability analysis found at the end (stability.json): each loss and gradient-norm
  // spike's height at the step it starts (stability/loss_spike_height,
  // stability/grad_spike_height) and the divergence (stability/diverged = 1 at its step).
  void stability(const metrics::StabilityReport& report);

 private:
  // Runs write(writer) if there is a writer; a failure warns once and drops the writer.
  template <class Write>
  void write(Write&& write);

  std::optional<formats::EventFileWriter> writer_;
};

// The scalars of a metrics line, as RunEvents writes them: (tag, value) in the line's order.
std::vector<std::pair<std::string, double>> line_scalars(const nlohmann::json& line);

}  // namespace dark::train
