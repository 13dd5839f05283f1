// Validation metrics of a model: mean next-token loss, perplexity and top-1 accuracy, and the
// same split by position bucket (how much context each prediction had: train/metrics/by_position.h).
#pragma once
#include <cstdint>

#include "data/loader.h"
#include "nn/model.h"
#include "train/dist/communicator.h"
#include "train/metrics/by_position.h"

namespace dark::train {

// Leaves the model in eval mode while it lives, in its own mode after (an error included).
class EvalMode {
 public:
  explicit EvalMode(nn::CausalLM& model) : model_(model), was_training_(model.training()) { model.train(false); }
  ~EvalMode() { model_.train(was_training_); }
  EvalMode(const EvalMode&) = delete;
  EvalMode& operator=(const EvalMode&) = delete;

 private:
  nn::CausalLM& model_;
  bool was_training_;
};

struct EvalMetrics {
  double loss = 0;
  double perplexity = 0;
  double accuracy = 0;  // next-token top-1
  std::int64_t tokens = 0;
  metrics::ByPosition by_position;  // the position buckets the windows reach, nearest first
};

// Over the first `max_batches` batches (all when <= 0) of a validation set, in eval mode and
// without recording. The logits are made a chunk of rows at a time from the final hidden
// states (CausalLM::final_hidden, head_logits): never (B, T, vocab) at once, about
// kEvalLogitsPerChunk of them, so 4096-token windows of a 262k vocabulary fit. Each row's
// loss and hit are summed per input position where the logits are (in float64, in batch and
// row order), and only those per-position sums come back, once, at the end; the mean and the
// buckets are summed from them on the host in position order. With a communicator of several
// ranks (every rank calls it), rank r evaluates batches r, r + W, ... and the per-position
// sums are added over the ranks: every rank gets the metrics of all the batches. An
// evaluation that takes more than a few seconds logs its progress (train/progress.h).
// logits_per_chunk: the chunks' size (tests take small ones to cross chunk ends). The default
// is linear_cross_entropy's, 2^27 logits (512 MiB in f32; at least one row). Each chunk reads
// the head's whole weight: on Gemma 3 at 4096 tokens (a 671 MB head), chunks of 2^26 and 2^27
// logits took about 10% more CPU time than the whole (B T, V) logits at once, 2^28 4%.
inline constexpr std::int64_t kEvalLogitsPerChunk = std::int64_t{1} << 27;
EvalMetrics evaluate(nn::CausalLM& model, const data::BatchSet& val, std::int64_t max_batches,
                     std::int64_t logits_per_chunk = kEvalLogitsPerChunk);
EvalMetrics evaluate(nn::CausalLM& model, const data::BatchSet& val, std::int64_t max_batches,
                     dist::Communicator& comm);

}  // namespace dark::train
