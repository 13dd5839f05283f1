// Flat parameter and gradient buffers. The trainable parameters of a model are moved
// into one contiguous float32 buffer (each parameter becomes a view of it) and each gets
// a gradient view in a second buffer, bound with autograd's bind_grad, that backward adds
// into in place. Segments start at 64-byte boundaries, in the order the parameters were
// given. Zeroing, the global gradient norm, the finiteness check, optimizer updates,
// all-reduce and checkpoint I/O are then each one call over one buffer; on_grad_ready
// tells, during backward, when an entry's segment of the gradient buffer is final (to
// start all-reducing a bucket of segments while backward goes on).
//
// Shards (ZeRO stage 1, train/data_parallel.h): the buffers are padded with zeros to a
// multiple of shards x kNormChunk elements and cut into `shards` equal slices; rank r's
// optimizer keeps and updates slice r. The gradient norm is summed per kNormChunk chunk and
// then over the chunks in order, so a rank holding only its slice's gradients can compute its
// chunks, gather everyone's, and get the unsharded norm bit for bit.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace dark::nn {

// A half-open range [begin, end) of a flat buffer, in elements.
struct FlatRange {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
};

class ParameterBuffer {
 public:
  struct Entry {
    std::string name;
    Tensor* param;  // the module's member, rebound to a view of values()
    std::int64_t offset = 0, numel = 0;
  };

  // Elements per chunk of the gradient norm's first summation level (16 KiB of float32).
  static constexpr std::int64_t kNormChunk = 4096;

  // Takes over the given parameters (all float32, one device); see the top for `shards`.
  explicit ParameterBuffer(const std::vector<std::pair<std::string, Tensor*>>& params, int shards = 1);

  const std::vector<Entry>& entries() const { return entries_; }
  const Tensor& values() const { return values_; }
  const Tensor& grads() const { return grads_; }
  std::int64_t numel() const { return values_.numel(); }  // padding included
  std::int64_t used() const { return used_; }             // the end of the last parameter's segment
  int shards() const { return shards_; }
  std::int64_t shard_size() const { return numel() / shards_; }  // a multiple of kNormChunk
  FlatRange shard(int index) const;

  // Adds hook to every entry's parameter with autograd's on_grad_ready (see
  // autograd/grad_binding.h for when it fires: once per backward() for each entry the
  // graph reaches, on the backward thread). The hooks stay for the parameters' lifetime.
  void on_grad_ready(const std::function<void(const Entry&)>& hook);

  // Zeroes the gradient buffer; the gradient views stay bound.
  void zero_grad();
  // sqrt(sum of squared gradients); NaN or inf when any gradient is not finite.
  double grad_norm() const;
  // The sum of squared gradients as a one-element float64 tensor where the gradients live
  // (nothing is read back): grad_norm() without the wait for the device. Equals
  // sum_chunks(grad_sq_chunks({0, numel()})).
  Tensor grad_sq_norm() const;
  // One float64 per kNormChunk chunk of `range` (bounds multiples of kNormChunk): the sum of
  // the squared gradients of that chunk, each chunk summed on its own.
  Tensor grad_sq_chunks(FlatRange range) const;
  // The float64 sum of chunk sums in their order (one element, where they live).
  static Tensor sum_chunks(const Tensor& chunk_sums);
  void scale_grads(double factor);
  // The slice [offset, offset + numel) of a flat buffer, as a 1-D view.
  static Tensor segment(const Tensor& flat, const Entry& e);

 private:
  std::vector<Entry> entries_;
  Tensor values_, grads_;
  std::int64_t used_ = 0;
  int shards_ = 1;
};

}  // namespace dark::nn
