// Flat parameter / gradient buffers (see parameter_buffer.h).
#include "nn/parameter_buffer.h"

#include <cmath>

#include "autograd/grad_binding.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/kernels.h"

namespace dark::nn {

ParameterBuffer::ParameterBuffer(const std::vector<std::pair<std::string, Tensor*>>& params, int shards)
    : shards_(shards) {
  DARK_CHECK(!params.empty(), "ParameterBuffer: no trainable parameters");
  DARK_CHECK(shards >= 1, "ParameterBuffer: shards is ", shards, ", expected >= 1");
  const Device device = params.front().second->device();
  std::int64_t total = 0;
  for (const auto& [name, p] : params) {
    DARK_CHECK(p->dtype() == DType::f32, "ParameterBuffer: parameter ", name, " is ", p->describe(), ", expected f32");
    DARK_CHECK(p->device() == device, "ParameterBuffer: parameter ", name, " is on ", p->device().to_string(),
               ", others on ", device.to_string());
    entries_.push_back({name, p, total, p->numel()});
    total += (p->numel() + 15) / 16 * 16;  // 64-byte aligned segments
  }
  const std::int64_t unit = shards * kNormChunk;
  total = (total + unit - 1) / unit * unit;
  values_ = Tensor::zeros({total}, DType::f32, device);
  grads_ = Tensor::zeros({total}, DType::f32, device);
  NoGradGuard no_grad;
  for (const Entry& e : entries_) {
    Tensor view = core::reshape(segment(values_, e), e.param->shape());
    view.copy_(*e.param);
    view.set_requires_grad(true);
    bind_grad(view, core::reshape(segment(grads_, e), e.param->shape()));
    note_grad_zeroed(view);
    *e.param = view;
  }
}

std::int64_t ParameterBuffer::used() const { return entries_.back().offset + entries_.back().numel; }

FlatRange ParameterBuffer::shard(int index) const {
  DARK_CHECK(index >= 0 && index < shards_, "ParameterBuffer: shard ", index, " of ", shards_);
  return {index * shard_size(), (index + 1) * shard_size()};
}

void ParameterBuffer::on_grad_ready(const std::function<void(const Entry&)>& hook) {
  // Each hook holds its own copy of the entry, so it does not depend on this buffer object
  // staying where it is; the entry's param points at the module's member.
  for (const Entry& e : entries_) dark::on_grad_ready(*e.param, [hook, e] { hook(e); });
}

Tensor ParameterBuffer::segment(const Tensor& flat, const Entry& e) {
  return core::slice(flat, 0, e.offset, e.offset + e.numel);
}

std::unique_ptr<WeightCopies> ParameterBuffer::cast_values(DType dtype) const {
  auto copies = std::make_unique<WeightCopies>();
  const Tensor flat = values_.to(dtype);  // one kernel for all of them
  for (const Entry& e : entries_) copies->add(*e.param, core::reshape(segment(flat, e), e.param->shape()));
  return copies;
}

void ParameterBuffer::zero_grad() {
  grads_.fill_(0.0);
  // So the op that first contributes to a parameter's gradient may write it in place.
  for (const Entry& e : entries_) note_grad_zeroed(*e.param);
}

double ParameterBuffer::grad_norm() const { return std::sqrt(grad_sq_norm().item()); }

Tensor ParameterBuffer::grad_sq_norm() const { return sum_chunks(grad_sq_chunks({0, numel()})); }

Tensor ParameterBuffer::grad_sq_chunks(FlatRange range) const {
  DARK_CHECK(range.begin >= 0 && range.begin <= range.end && range.end <= numel() && range.begin % kNormChunk == 0 &&
                 range.end % kNormChunk == 0,
             "grad_sq_chunks: range [", range.begin, ", ", range.end, ") is not within [0, ", numel(),
             ") with bounds that are multiples of ", kNormChunk);
  NoGradGuard no_grad;
  // One kernel for the whole range: it squares and sums each chunk in float64 without
  // temporaries (the composed cast, square and sum took 4 launches per 128 chunks, over a
  // thousand per step at GPT-2 small's size).
  Tensor out = Tensor::empty({range.size() / kNormChunk}, DType::f64, grads_.device());
  const Tensor lines = core::slice(grads_, 0, range.begin, range.end);
  kernels::chunk_sq_norms().get(grads_.device().type, DType::f32)(lines, out, kNormChunk);
  return out;
}

Tensor ParameterBuffer::sum_chunks(const Tensor& chunk_sums) {
  DARK_CHECK(chunk_sums.dim() == 1 && chunk_sums.dtype() == DType::f64, "sum_chunks: chunk sums ",
             chunk_sums.describe(), ", expected a 1-D f64 tensor");
  NoGradGuard no_grad;
  return reshape(sum(chunk_sums), {1});
}

void ParameterBuffer::scale_grads(double factor) {
  // In place, one launch: an elementwise kernel reads each element before writing it, so
  // x and y may be one buffer; the product rounds as mul_scalar's.
  kernels::unary_forward().get(grads_.device().type, DType::f32)(UnaryOp::mul_scalar, grads_, grads_, factor);
}

}  // namespace dark::nn
