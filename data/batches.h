// What the trainer reads batches from, whatever makes them: token windows of a corpus
// (loader.h: TrainLoader, ValidationSet) or a synthetic task (mqar.h). A batch is an i32
// tensor (rows, seq_len + 1) on the model's device: inputs are columns 0..T-1, targets 1..T.
// An entry may be marked "not scored" in band (nn/model.h, unscored_as_ids): a synthetic task
// that scores only some positions marks the others; corpus windows mark nothing.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace dark::data {

// Training batches: batch(index) is a pure function of the index (and the source's seed), so
// a resumed run needs no state and data-parallel ranks read disjoint indices of one order.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Batch `index` (>= 0): (batch_size, seq_len + 1) i32.
  virtual Tensor batch(std::int64_t index) const = 0;
};

// A fixed validation set: the same batches every call.
class BatchSet {
 public:
  virtual ~BatchSet() = default;
  virtual std::int64_t num_batches() const = 0;
  // (rows, seq_len + 1) i32; every batch has the set's batch size of rows but possibly the last.
  virtual Tensor batch(std::int64_t index) const = 0;
  // Rows over all batches (windows, or sequences).
  virtual std::int64_t num_windows() const = 0;
};

}  // namespace dark::data
