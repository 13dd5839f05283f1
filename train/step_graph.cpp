// Step graphs (see step_graph.h).
#include "train/step_graph.h"

#include <spdlog/spdlog.h>

#include "core/error.h"

namespace dark::train {

void StepGraph::capture(const std::vector<Tensor>& batches, const std::vector<std::int64_t>& signature,
                        const Passes& passes) {
  graph_.reset();  // its memory goes back before the new capture takes any
  checks_.reset();
  loss_sum_ = Tensor();
  inputs_.clear();
  for (const Tensor& b : batches) inputs_.push_back(Tensor::empty(b.shape(), b.dtype(), device_));
  const auto n = static_cast<std::int64_t>(batches.size());
  dropout_offsets_ = Tensor::empty({n}, DType::i64, device_);
  std::vector<nn::DropoutKey> dropout(batches.size());
  for (std::int64_t m = 0; m < n; ++m) dropout[m].device_offset = core::slice(dropout_offsets_, 0, m, m + 1);
  // Before the capture: the checks' device words are set (all clear) once, eagerly.
  auto checks = std::make_unique<DeferredChecks>(device_);
  try {
    graph_ = std::make_unique<DeviceGraph>(device_, [&] { loss_sum_ = passes(inputs_, dropout); });
  } catch (const OutOfMemory&) {  // says itself that a capture ran, and stays an OutOfMemory
    throw;
  } catch (const Error& e) {
    throw Error(str("training.cuda_graph: the step's passes could not be captured as a CUDA graph (set "
                    "training.cuda_graph false to train without one): ",
                    e.what()));
  }
  checks->close();
  checks_ = std::move(checks);
  signature_ = signature;
  ++captures_;
  spdlog::debug("step graph: captured (capture {}; {:.1f} MiB of its own memory)", captures_,
                graph_->pool_bytes() / (1024.0 * 1024.0));
}

void StepGraph::write_inputs(const std::vector<Tensor>& batches, const std::vector<std::uint64_t>& dropout_steps) {
  DARK_CHECK(batches.size() == inputs_.size() && dropout_steps.size() == inputs_.size(), "StepGraph: ", batches.size(),
             " micro-batches and ", dropout_steps.size(), " dropout steps; the graph was captured with ",
             inputs_.size());
  for (std::size_t i = 0; i < batches.size(); ++i) inputs_[i].copy_(batches[i]);
  std::vector<std::int64_t> offsets;
  for (std::uint64_t step : dropout_steps)
    offsets.push_back(static_cast<std::int64_t>(nn::dropout_stream_offset(step)));
  dropout_offsets_.copy_(Tensor::from_vector(offsets, {static_cast<std::int64_t>(offsets.size())}));
}

Tensor StepGraph::launch(const std::vector<Tensor>& batches, const std::vector<std::uint64_t>& dropout_steps,
                         const std::vector<std::int64_t>& signature, const Passes& passes) {
  DARK_CHECK(applies(signature, false),
             "StepGraph::launch: the step before must have run with the same feature epochs");
  if (!graph_ || signature != signature_) {
    capture(batches, signature, passes);
  }
  write_inputs(batches, dropout_steps);
  graph_->launch();
  previous_signature_ = signature;
  return loss_sum_;
}

std::vector<nn::DropoutKey> host_dropout_keys(const std::vector<std::uint64_t>& steps) {
  std::vector<nn::DropoutKey> keys;
  for (std::uint64_t step : steps) keys.push_back({step, Tensor()});
  return keys;
}

}  // namespace dark::train
