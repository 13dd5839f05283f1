// training.cuda_graph: the forward and backward passes of an optimizer step's micro-batches,
// captured once as a CUDA graph (core/device_graph.h) and launched at every step after, one
// launch instead of hundreds of kernel launches. The update (clipping, the optimizer) stays
// eager: it takes the step's learning rate and reads nothing back inside the graph.
//
// A graph repeats what the host decided when it was captured, so steps whose host side
// differs run eagerly or capture anew:
//   - the first step runs eagerly: it fills what is made on first use (caches, the
//     allocator's blocks, cuBLAS's set-up), which a capture must find ready;
//   - a step that measures attention statistics (the log steps) runs eagerly;
//   - the first step of a new feature epoch (a random-feature redraw) runs eagerly, since
//     the features are drawn on the host and copied to the device; the next step captures
//     again, as the old graph reads the old features.
// Everything else a step varies is data: each step's batches, and the keys of its dropout
// masks (nn::DropoutKey's device offsets), are copied into the tensors the graph reads, and
// its loss sum is the tensor the graph writes. The index checks deferred inside the graph are
// the graph's own (checks()), read back with the step's scalars.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/deferred_checks.h"
#include "core/device_graph.h"
#include "core/tensor.h"
#include "nn/model.h"

namespace dark::train {

class StepGraph {
 public:
  // The passes of one step on its micro-batches, micro-batch m's dropout masks keyed by
  // dropout[m]: the float64 loss sum on the device.
  using Passes = std::function<Tensor(const std::vector<Tensor>& batches, const std::vector<nn::DropoutKey>& dropout)>;

  explicit StepGraph(Device device) : device_(device) {}

  // Whether a step with feature epochs `signature` may run as a graph: when the step before
  // ran with the same epochs (so this one draws nothing on the host), and unless it must run
  // eagerly (`eager_only`: attention statistics requested, a kernel profile).
  bool applies(const std::vector<std::int64_t>& signature, bool eager_only) const {
    return !eager_only && previous_signature_ && *previous_signature_ == signature;
  }
  // Notes an eager step with feature epochs `signature`.
  void eager_step_ran(const std::vector<std::int64_t>& signature) { previous_signature_ = signature; }
  // The step as a graph: captures `passes` (on the graph's own copies of the batches and
  // dropout keys) when there is no graph yet or `signature` (the feature epochs) differs from
  // its capture's, copies `batches` and the micro-batches' dropout steps into the graph's
  // inputs, and launches it. Returns the loss sum.
  Tensor launch(const std::vector<Tensor>& batches, const std::vector<std::uint64_t>& dropout_steps,
                const std::vector<std::int64_t>& signature, const Passes& passes);
  // The index checks the graph defers (valid after launch()).
  const DeferredChecks& checks() const { return *checks_; }
  // Captures so far (the first, then one per new feature epoch).
  int captures() const { return captures_; }
  // The memory the graph keeps for its launches (its pool: the passes' intermediates).
  std::size_t memory_bytes() const { return graph_ ? graph_->pool_bytes() : 0; }

 private:
  void capture(const std::vector<Tensor>& batches, const std::vector<std::int64_t>& signature, const Passes& passes);
  void write_inputs(const std::vector<Tensor>& batches, const std::vector<std::uint64_t>& dropout_steps);

  Device device_;
  std::optional<std::vector<std::int64_t>> previous_signature_;  // of the last step; none before the first
  int captures_ = 0;
  std::vector<Tensor> inputs_;  // the batches the graph reads
  Tensor dropout_offsets_;      // i64 (micro-batches): nn::dropout_stream_offset of each one's step
  std::unique_ptr<DeferredChecks> checks_;
  std::unique_ptr<DeviceGraph> graph_;
  Tensor loss_sum_;  // what the graph writes
  std::vector<std::int64_t> signature_;
};

// The dropout keys of an eager step's micro-batches: their steps, on the host.
std::vector<nn::DropoutKey> host_dropout_keys(const std::vector<std::uint64_t>& steps);

}  // namespace dark::train
