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
  for (std::size_t i = 0; i < batches.size(); ++i) inputs_[i].copy_(batches[i]);
  // Before the capture: the checks' device words are set (all clear) once, eagerly.
  auto checks = std::make_unique<DeferredChecks>(device_);
  try {
    graph_ = std::make_unique<DeviceGraph>(device_, [&] { loss_sum_ = passes(inputs_); });
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

Tensor StepGraph::launch(const std::vector<Tensor>& batches, const std::vector<std::int64_t>& signature,
                         const Passes& passes) {
  DARK_CHECK(applies(signature, false),
             "StepGraph::launch: the step before must have run with the same feature epochs");
  if (!graph_ || signature != signature_) {
    capture(batches, signature, passes);
  } else {
    DARK_CHECK(batches.size() == inputs_.size(), "StepGraph: ", batches.size(),
               " micro-batches; the graph was captured with ", inputs_.size());
    for (std::size_t i = 0; i < batches.size(); ++i) inputs_[i].copy_(batches[i]);
  }
  graph_->launch();
  previous_signature_ = signature;
  return loss_sum_;
}

}  // namespace dark::train
