// Batches of token windows for training and validation.
//
// A window is seq_len + 1 consecutive tokens (inputs plus the shifted targets). Where the
// windows lie is the layout (windows.h, data.windows): packed, window i starts at token
// i * seq_len of the whole shard, (num_tokens - 1) / seq_len of them, crossing documents; or
// document, every window inside one document, at stride seq_len from the document's start.
// The loaders default to packed (what they did before data.windows, and what the tests of
// that behaviour build); a run passes its config's data.windows, whose default is document.
// Window numbers (window_indices) count the layout's windows.
//
// With a bos id (>= 0; the prepared folder's rule, prepare.h BosRule) every window starts
// with bos: a window whose first token is bos is read as it lies; any other is bos followed
// by the seq_len tokens from its start (the last one dropped, so shapes stay fixed). Every
// token the layout's windows cover (packed: the whole shard) is then still the target of some
// window, except a bos that starts one.
//
// TrainLoader order: epoch e visits every window once in the order of a Fisher-Yates
// permutation drawn from Philox (seed, kStreamDataOrder + e). Batch i of epoch e takes
// permutation positions [j * B, (j + 1) * B) with j = i mod batches_per_epoch (B =
// batch_size). So no window repeats within an epoch (the last num_windows mod B windows of
// an epoch's permutation are skipped), and batch(i) is a pure function of (shard, seed, i):
// resuming needs no state. The trainer numbers the micro-batches of all steps and all ranks
// of a run in one sequence (train/train_step.h, micro_batch_index), so data-parallel ranks
// read disjoint batches of one global order without the loader knowing about ranks.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/tensor.h"
#include "data/batches.h"
#include "data/shard.h"
#include "data/windows.h"

namespace dark::data {

struct LoaderOptions {
  std::int64_t batch_size = 8;   // windows per batch
  std::int64_t seq_len = 256;    // window = seq_len + 1 tokens
  std::uint64_t seed = 0;        // data-order seed
  Device device = Device::cpu();  // where batches are delivered (the model's device)
  std::int32_t bos_id = -1;       // >= 0: every window starts with this token (see above)
  WindowMode windows = WindowMode::packed;  // where windows lie (see above; a run passes data.windows)
};

class TrainLoader : public BatchSource {
 public:
  // Throws when the shard has fewer than seq_len + 1 tokens (naming both numbers), in document
  // mode when no document holds a window (naming the longest), or with fewer windows than one
  // batch.
  TrainLoader(std::shared_ptr<const TokenShard> shard, const LoaderOptions& options);

  // Batch `index` (>= 0): i32 tensor (batch_size, seq_len + 1) on options().device.
  Tensor batch(std::int64_t index) const override;
  // The window indices of batch(index)'s rows (what batch() reads; for tests and logging).
  std::vector<std::int64_t> window_indices(std::int64_t index) const;

  std::int64_t num_windows() const { return num_windows_; }
  std::int64_t batches_per_epoch() const { return batches_per_epoch_; }
  std::int64_t epoch_of(std::int64_t index) const { return index / batches_per_epoch_; }
  const LoaderOptions& options() const { return options_; }
  const TokenShard& shard() const { return *shard_; }
  const WindowLayout& layout() const { return layout_; }

 private:
  // The permutation of epoch `epoch` (cached; computing one costs O(num_windows)).
  std::shared_ptr<const std::vector<std::int64_t>> permutation(std::int64_t epoch) const;

  std::shared_ptr<const TokenShard> shard_;
  LoaderOptions options_;
  WindowLayout layout_;
  std::int64_t num_windows_ = 0;
  std::int64_t batches_per_epoch_ = 0;
  mutable std::mutex mutex_;
  mutable std::int64_t cached_epoch_ = -1;
  mutable std::shared_ptr<const std::vector<std::int64_t>> cached_permutation_;
};

// A fixed validation set: min(max_windows, available) windows evenly spaced over the layout's
// windows (window k of n is window floor(k * available / n); all windows in order when n
// equals available), cut into batches of batch_size rows; the last batch may have fewer rows.
// The same windows every call, independent of any seed.
class ValidationSet : public BatchSet {
 public:
  // max_windows <= 0 means every window; batches are delivered on `device`. Throws when the
  // shard has fewer than seq_len + 1 tokens, naming both numbers, and in document mode when no
  // document holds a window. bos_id >= 0: every window starts with it (see above).
  ValidationSet(std::shared_ptr<const TokenShard> shard, std::int64_t batch_size, std::int64_t seq_len,
                std::int64_t max_windows = 0, Device device = Device::cpu(), std::int32_t bos_id = -1,
                WindowMode windows = WindowMode::packed);

  std::int64_t num_batches() const override;
  std::int64_t num_windows() const override { return static_cast<std::int64_t>(windows_.size()); }
  // i32 tensor (rows, seq_len + 1), rows = batch_size except possibly for the last batch.
  Tensor batch(std::int64_t index) const override;
  const std::vector<std::int64_t>& window_indices() const { return windows_; }
  // Every window of the split, of which window_indices() are chosen.
  const WindowLayout& layout() const { return layout_; }

 private:
  std::shared_ptr<const TokenShard> shard_;
  std::int64_t batch_size_;
  WindowLayout layout_;
  std::vector<std::int64_t> windows_;
  Device device_;
  std::int32_t bos_id_;
};

}  // namespace dark::data
