// Flat parameter / gradient buffers (see parameter_buffer.h).
#include "nn/parameter_buffer.h"

#include <cmath>

#include "autograd/grad_binding.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace dark::nn {

ParameterBuffer::ParameterBuffer(const std::vector<std::pair<std::string, Tensor*>>& params, int shards)
    : shards_(shards) {
  DARK_CHECK(!params.empty(), "ParameterBuffer: no trainable parameters");
  DARK_CHECK(shards >= 1, "ParameterBuffer: shards must be >= 1, got ", shards);
  const Device device = params.front().second->device();
  std::int64_t total = 0;
  for (const auto& [name, p] : params) {
    DARK_CHECK(p->dtype() == DType::f32, "ParameterBuffer: parameter ", name, " is ", p->describe(), ", expected f32");
    DARK_CHECK(p->device() == device, "ParameterBuffer: parameter ", name, " is on ", p->device().to_string(),
               ", others on ", device.to_string());
    entries_.push_back({name, p, total, p->numel()});
    total += (p->numel() + 15) / 16 * 16;  // 64-byte aligned segments
  }
  used_ = total;
  const std::int64_t multiple = kNormChunk * shards;
  total = (total + multiple - 1) / multiple * multiple;  // equal shards of whole chunks
  values_ = Tensor::zeros({total}, DType::f32, device);
  grads_ = Tensor::zeros({total}, DType::f32, device);
  NoGradGuard no_grad;
  for (const Entry& e : entries_) {
    Tensor view = core::reshape(segment(values_, e), e.param->shape());
    view.copy_(*e.param);
    view.set_requires_grad(true);
    bind_grad(view, core::reshape(segment(grads_, e), e.param->shape()));
    *e.param = view;
  }
}

void ParameterBuffer::on_grad_ready(const std::function<void(const Entry&)>& hook) {
  // Each hook holds its own copy of the entry, so it does not depend on this buffer object
  // staying where it is; the entry's param points at the module's member.
  for (const Entry& e : entries_) dark::on_grad_ready(*e.param, [hook, e] { hook(e); });
}

Tensor ParameterBuffer::segment(const Tensor& flat, const Entry& e) {
  return core::slice(flat, 0, e.offset, e.offset + e.numel);
}

void ParameterBuffer::zero_grad() { grads_.fill_(0.0); }

double ParameterBuffer::grad_norm() const { return std::sqrt(grad_sq_norm().item()); }

FlatRange ParameterBuffer::shard(int index) const {
  DARK_CHECK(index >= 0 && index < shards_, "ParameterBuffer: shard ", index, " of ", shards_);
  return {index * shard_size(), (index + 1) * shard_size()};
}

Tensor ParameterBuffer::grad_sq_norm() const { return sum_chunks(grad_sq_chunks({0, numel()})); }

Tensor ParameterBuffer::grad_sq_chunks(FlatRange range) const {
  DARK_CHECK(range.begin % kNormChunk == 0 && range.end % kNormChunk == 0 && 0 <= range.begin &&
                 range.begin <= range.end && range.end <= numel(),
             "ParameterBuffer::grad_sq_chunks: [", range.begin, ", ", range.end, ") is not a range of whole ",
             kNormChunk, "-element chunks of the ", numel(), "-element buffer");
  NoGradGuard no_grad;
  // Each chunk is one line of the reduction: its sum depends on its elements only, not on
  // how many chunks are reduced together (core/cpu/reduce.cpp: one double accumulator per line).
  const Tensor chunks = core::reshape(core::slice(grads_, 0, range.begin, range.end), {range.size() / kNormChunk, kNormChunk});
  return sum(square(chunks), {1}).to(DType::f64);
}

Tensor ParameterBuffer::sum_chunks(const Tensor& chunk_sums) {
  NoGradGuard no_grad;
  return reshape(sum(chunk_sums), {1});
}

void ParameterBuffer::scale_grads(double factor) {
  NoGradGuard no_grad;
  grads_.copy_(mul_scalar(grads_, factor));
}

}  // namespace dark::nn
