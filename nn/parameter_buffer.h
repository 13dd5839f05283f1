// Flat parameter and gradient buffers. The trainable parameters of a model are moved
// into one contiguous float32 buffer (each parameter becomes a view of it) and each gets
// a gradient view in a second buffer, bound with autograd's bind_grad, that backward adds
// into in place. Segments start at 64-byte boundaries, in the order the parameters were
// given. Zeroing, the global gradient norm, the finiteness check, optimizer updates,
// all-reduce and checkpoint I/O are then each one call over one buffer; on_grad_ready
// tells, during backward, when an entry's segment of the gradient buffer is final (to
// start all-reducing a bucket of segments while backward goes on).
//
// Sharding (ZeRO stage 1): both buffers are padded with zeros after the last segment so
// that numel() is a multiple of shards * kNormChunk; shard(i) is the i-th of `shards`
// equal, kNormChunk-aligned ranges. A segment may straddle a shard boundary. The padding
// and the gaps between segments stay zero (nothing writes them) and add nothing to the
// gradient norm.
//
// The gradient norm is computed per kNormChunk-sized chunk (a float64 sum of the chunk's
// exact squares, each a function of that chunk alone) and then summed over the chunks in
// an order fixed by their number, so a rank that holds only its shard's gradients can
// compute its chunks, gather every rank's and get, with sum_chunks, exactly the value
// grad_sq_norm() gives over the whole buffer.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/weights.h"
#include "core/tensor.h"

namespace dark::nn {

// A range [begin, end) of flat buffer elements.
struct FlatRange {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};

class ParameterBuffer {
 public:
  // Elements per gradient-norm chunk; shard_size() and numel() are multiples of it.
  static constexpr std::int64_t kNormChunk = 4096;

  struct Entry {
    std::string name;
    Tensor* param;  // the module's member, rebound to a view of values()
    std::int64_t offset = 0, numel = 0;
  };

  // Takes over the given parameters (all float32, one device); shards >= 1 is the number of
  // equal ranges the buffers are padded to divide into.
  explicit ParameterBuffer(const std::vector<std::pair<std::string, Tensor*>>& params, int shards = 1);

  const std::vector<Entry>& entries() const { return entries_; }
  const Tensor& values() const { return values_; }
  const Tensor& grads() const { return grads_; }
  // Elements in each flat buffer, padding included: a multiple of shards() * kNormChunk.
  std::int64_t numel() const { return values_.numel(); }
  // The end of the last parameter segment (everything from here to numel() is padding).
  std::int64_t used() const;
  int shards() const { return shards_; }
  // numel() / shards(), a multiple of kNormChunk.
  std::int64_t shard_size() const { return numel() / shards_; }
  // Shard `index` (0 <= index < shards()): [index * shard_size(), (index + 1) * shard_size()).
  FlatRange shard(int index) const;

  // Adds hook to every entry's parameter with autograd's on_grad_ready (see
  // autograd/grad_binding.h for when it fires: once per backward() for each entry the
  // graph reaches, on the backward thread). The hooks stay for the parameters' lifetime.
  void on_grad_ready(const std::function<void(const Entry&)>& hook);

  // Every parameter's values as `dtype` in one cast of the flat buffer, each parameter's slice
  // registered for autograd's weight_for (autograd/weights.h) while the returned object
  // lives: a training step's products then cast no weight of their own. Hold it over the
  // forward and backward passes only (the values must not change under it).
  std::unique_ptr<WeightCopies> cast_values(DType dtype) const;

  // Zeroes the gradient buffer; the gradient views stay bound. Until the next backward, only
  // backward may write them (see note_grad_zeroed in autograd/grad_binding.h).
  void zero_grad();
  // sqrt(grad_sq_norm()) read back to the host; NaN or inf when any gradient is not finite.
  double grad_norm() const;
  // The sum of squared gradients as a one-element float64 tensor where the gradients live
  // (nothing is read back): sum_chunks(grad_sq_chunks({0, numel()})).
  Tensor grad_sq_norm() const;
  // One float64 entry per kNormChunk elements of range (bounds multiples of kNormChunk):
  // the sum of the squared gradients of that chunk, which depends on the chunk's values only.
  Tensor grad_sq_chunks(FlatRange range) const;
  // The float64 sum of a 1-D float64 tensor of chunk sums, as a one-element tensor on its
  // device. The summation order depends only on the length (on the CPU: in order, so
  // trailing zero chunks change nothing; on CUDA: the reduce kernel's fixed tree).
  static Tensor sum_chunks(const Tensor& chunk_sums);
  void scale_grads(double factor);
  // The slice [offset, offset + numel) of a flat buffer, as a 1-D view.
  static Tensor segment(const Tensor& flat, const Entry& e);

 private:
  std::vector<Entry> entries_;
  int shards_ = 1;
  Tensor values_, grads_;
};

}  // namespace dark::nn
