// Validation metrics of a model: mean next-token loss, perplexity and top-1 accuracy.
#pragma once
#include <cstdint>

#include "data/loader.h"
#include "nn/model.h"
#include "train/dist/communicator.h"

namespace dark::train {

struct EvalMetrics {
  double loss = 0;
  double perplexity = 0;
  double accuracy = 0;  // next-token top-1
  std::int64_t tokens = 0;
};

// Over the first `max_batches` batches (all when <= 0) of a validation set, in eval mode and
// without recording. The sums are kept where the logits are (in float64, in batch order) and
// only they come back, once, at the end: no logits cross to the host. With a communicator of
// several ranks (every rank calls it), rank r evaluates batches r, r + W, ... and the sums
// are added over the ranks: every rank gets the metrics of all the batches. An evaluation
// that takes more than a few seconds logs its progress (train/progress.h).
EvalMetrics evaluate(nn::CausalLM& model, const data::ValidationSet& val, std::int64_t max_batches);
EvalMetrics evaluate(nn::CausalLM& model, const data::ValidationSet& val, std::int64_t max_batches,
                     dist::Communicator& comm);

}  // namespace dark::train
