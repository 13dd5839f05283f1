// TrainLoader (Philox-permuted windows) and ValidationSet, over a WindowLayout.
#include "data/loader.h"

#include <numeric>

#include "core/error.h"
#include "data/hash.h"

namespace dark::data {
namespace {

// The shape checks, then the layout (whose own error, no document long enough, comes second).
WindowLayout checked_layout(const std::shared_ptr<const TokenShard>& shard, std::int64_t batch_size,
                            std::int64_t seq_len, WindowMode mode, const char* who) {
  DARK_CHECK(shard != nullptr, who, ": no shard");
  DARK_CHECK(batch_size > 0, who, ": batch_size must be positive, got ", batch_size);
  DARK_CHECK(seq_len > 0, who, ": seq_len must be positive, got ", seq_len);
  DARK_CHECK(shard->size() >= seq_len + 1, who, ": corpus shorter than seq_len + 1 tokens: ", shard->path(), " has ",
             shard->size(), " tokens, one window needs seq_len + 1 = ", seq_len + 1);
  return WindowLayout(*shard, seq_len, mode, who);
}

Tensor gather_windows(const TokenShard& shard, const WindowLayout& layout, const std::vector<std::int64_t>& windows,
                      std::int32_t bos_id) {
  const std::int64_t rows = static_cast<std::int64_t>(windows.size()), cols = layout.seq_len() + 1;
  Tensor out = Tensor::empty({rows, cols}, DType::i32);
  std::int32_t* p = out.data<std::int32_t>();
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int32_t* row = p + r * cols;
    shard.read(layout.start(windows[r]), cols, row);
    if (bos_id < 0 || row[0] == bos_id) continue;
    // Mid-document: bos, then the window's tokens shifted right by one (the last dropped).
    for (std::int64_t c = cols - 1; c > 0; --c) row[c] = row[c - 1];
    row[0] = bos_id;
  }
  return out;
}

}  // namespace

TrainLoader::TrainLoader(std::shared_ptr<const TokenShard> shard, const LoaderOptions& options)
    : shard_(std::move(shard)),
      options_(options),
      layout_(checked_layout(shard_, options.batch_size, options.seq_len, options.windows, "train loader")) {
  num_windows_ = layout_.size();
  batches_per_epoch_ = num_windows_ / options.batch_size;
  DARK_CHECK(batches_per_epoch_ > 0, "train loader: ", shard_->path(), " has ", num_windows_, " ",
             enum_name(options.windows), " windows of seq_len + 1 = ", options.seq_len + 1,
             " tokens, fewer than one batch (batch_size ", options.batch_size, ")");
}

std::shared_ptr<const std::vector<std::int64_t>> TrainLoader::permutation(std::int64_t epoch) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (epoch == cached_epoch_) return cached_permutation_;
  auto perm = std::make_shared<std::vector<std::int64_t>>(static_cast<std::size_t>(num_windows_));
  std::iota(perm->begin(), perm->end(), std::int64_t{0});
  const std::uint64_t stream = kStreamDataOrder + static_cast<std::uint64_t>(epoch);
  for (std::int64_t i = num_windows_ - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(
        uniform_below(options_.seed, stream, static_cast<std::uint64_t>(i), static_cast<std::uint64_t>(i) + 1));
    std::swap((*perm)[i], (*perm)[j]);
  }
  cached_epoch_ = epoch;
  cached_permutation_ = perm;
  return perm;
}

std::vector<std::int64_t> TrainLoader::window_indices(std::int64_t index) const {
  DARK_CHECK(index >= 0, "train loader: batch index must be >= 0, got ", index);
  const auto perm = permutation(epoch_of(index));
  const std::int64_t j = index % batches_per_epoch_;
  const std::int64_t B = options_.batch_size;
  std::vector<std::int64_t> windows(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) windows[b] = (*perm)[j * B + b];
  return windows;
}

Tensor TrainLoader::batch(std::int64_t index) const {
  return gather_windows(*shard_, layout_, window_indices(index), options_.bos_id).to(options_.device);
}

ValidationSet::ValidationSet(std::shared_ptr<const TokenShard> shard, std::int64_t batch_size, std::int64_t seq_len,
                             std::int64_t max_windows, Device device, std::int32_t bos_id, WindowMode windows)
    : shard_(std::move(shard)),
      batch_size_(batch_size),
      layout_(checked_layout(shard_, batch_size, seq_len, windows, "validation set")),
      device_(device),
      bos_id_(bos_id) {
  const std::int64_t available = layout_.size();
  const std::int64_t n = max_windows > 0 ? std::min(max_windows, available) : available;
  windows_.resize(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k)
    windows_[k] = static_cast<std::int64_t>(static_cast<unsigned __int128>(k) * available / n);
}

std::int64_t ValidationSet::num_batches() const { return (num_windows() + batch_size_ - 1) / batch_size_; }

Tensor ValidationSet::batch(std::int64_t index) const {
  DARK_CHECK(index >= 0 && index < num_batches(), "validation set: batch ", index, " outside [0, ", num_batches(), ")");
  const std::int64_t begin = index * batch_size_, end = std::min(begin + batch_size_, num_windows());
  return gather_windows(*shard_, layout_, std::vector<std::int64_t>(windows_.begin() + begin, windows_.begin() + end),
                        bos_id_)
      .to(device_);
}

}  // namespace dark::data
