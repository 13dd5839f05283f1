// Flat parameter / gradient buffers (see parameter_buffer.h).
#include "nn/parameter_buffer.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_binding.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace dark::nn {
namespace {

// Chunks per pass of grad_sq_chunks: bounds its float64 temporaries (2 x 4 MiB) whatever
// the size of the range. They come after the backward, when the cache holds mostly
// activation-sized blocks, so each new size grows the resident set for the whole run: at
// 1024 chunks per pass (2 x 32 MiB) that was 64 MiB of small.json's 1112 MB peak RSS.
constexpr std::int64_t kNormChunksPerPass = 128;
// Elements per piece of scale_grads: its temporary (4 MiB) instead of a copy of the buffer.
constexpr std::int64_t kScalePiece = std::int64_t{1} << 20;

}  // namespace

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

void ParameterBuffer::zero_grad() { grads_.fill_(0.0); }

double ParameterBuffer::grad_norm() const { return std::sqrt(grad_sq_norm().item()); }

Tensor ParameterBuffer::grad_sq_norm() const { return sum_chunks(grad_sq_chunks({0, numel()})); }

Tensor ParameterBuffer::grad_sq_chunks(FlatRange range) const {
  DARK_CHECK(range.begin >= 0 && range.begin <= range.end && range.end <= numel() && range.begin % kNormChunk == 0 &&
                 range.end % kNormChunk == 0,
             "grad_sq_chunks: range [", range.begin, ", ", range.end, ") is not within [0, ", numel(),
             ") with bounds that are multiples of ", kNormChunk);
  NoGradGuard no_grad;
  const std::int64_t chunks = range.size() / kNormChunk;
  Tensor out = Tensor::empty({chunks}, DType::f64, grads_.device());
  // Each chunk is one line of the reduction: a sum over the chunk alone, in an order fixed
  // by kNormChunk (the reduce kernels' contract), so the pass boundaries change nothing.
  // Squares are taken in float64, where a float32 value's square is exact.
  for (std::int64_t first = 0; first < chunks; first += kNormChunksPerPass) {
    const std::int64_t n = std::min(kNormChunksPerPass, chunks - first);
    const std::int64_t begin = range.begin + first * kNormChunk;
    const Tensor lines = core::reshape(core::slice(grads_, 0, begin, begin + n * kNormChunk), {n, kNormChunk});
    core::slice(out, 0, first, first + n).copy_(sum(square(lines.to(DType::f64)), {1}));
  }
  return out;
}

Tensor ParameterBuffer::sum_chunks(const Tensor& chunk_sums) {
  DARK_CHECK(chunk_sums.dim() == 1 && chunk_sums.dtype() == DType::f64, "sum_chunks: chunk sums ",
             chunk_sums.describe(), ", expected a 1-D f64 tensor");
  NoGradGuard no_grad;
  return reshape(sum(chunk_sums), {1});
}

void ParameterBuffer::scale_grads(double factor) {
  NoGradGuard no_grad;
  for (std::int64_t begin = 0; begin < numel(); begin += kScalePiece) {
    Tensor piece = core::slice(grads_, 0, begin, std::min(numel(), begin + kScalePiece));
    piece.copy_(mul_scalar(piece, factor));
  }
}

}  // namespace dark::nn
