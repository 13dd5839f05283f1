// AdamW and SGD (see optim.h).
#include "nn/optim.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/kernels.h"

namespace dark::nn {
namespace {

// The part of entry e's segment that lies in shard, as flat offsets (size() <= 0: none).
FlatRange overlap(const ParameterBuffer::Entry& e, FlatRange shard) {
  return {std::max(e.offset, shard.begin), std::min(e.offset + e.numel, shard.end)};
}

// Elements [r.begin, r.end) of a flat buffer whose element 0 is at flat offset origin.
Tensor flat_slice(const Tensor& flat, FlatRange r, std::int64_t origin = 0) {
  return core::slice(flat, 0, r.begin - origin, r.end - origin);
}

}  // namespace

bool matches_any(const std::string& name, const std::vector<std::string>& patterns) {
  for (const std::string& p : patterns)
    if (fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  return false;
}

double clip_factor(double grad_norm, double max_norm) {
  return max_norm > 0 && grad_norm > max_norm ? max_norm / grad_norm : 1.0;
}

Optimizer::Optimizer(ParameterBuffer& params, OptimizerConfig config, FlatRange shard)
    : params_(params), config_(std::move(config)), shard_(shard.size() == 0 ? FlatRange{0, params.numel()} : shard) {
  DARK_CHECK(shard_.begin >= 0 && shard_.begin < shard_.end && shard_.end <= params_.numel(), "optimizer: shard [",
             shard_.begin, ", ", shard_.end, ") is not a range of the parameter buffer [0, ", params_.numel(), ")");
  // The decayed parts of the shard as ranges relative to its start; consecutive decayed
  // segments merge (what lies between them is zero padding).
  std::vector<std::int64_t> ranges;
  bool previous_decayed = false;  // the previous segment in the shard decays
  for (const auto& e : params_.entries()) {
    decay_.push_back(!matches_any(e.name, config_.no_decay));
    const FlatRange r = overlap(e, shard_);
    if (r.size() <= 0) continue;
    if (decay_.back() && previous_decayed) ranges.back() = r.end - shard_.begin;
    else if (decay_.back()) ranges.insert(ranges.end(), {r.begin - shard_.begin, r.end - shard_.begin});
    previous_decayed = decay_.back();
  }
  decay_ranges_ = Tensor::from_vector(ranges, {static_cast<std::int64_t>(ranges.size() / 2), 2}).to(params_.values().device());
  exp_avg_ = Tensor::zeros({shard_.size()}, DType::f32, params_.values().device());
  if (config_.name == OptimizerKind::adamw) exp_avg_sq_ = Tensor::zeros({shard_.size()}, DType::f32, params_.values().device());
}

std::int64_t Optimizer::state_bytes() const {
  const std::int64_t elements = exp_avg_.numel() + (exp_avg_sq_.defined() ? exp_avg_sq_.numel() : 0);
  return elements * static_cast<std::int64_t>(dtype_size(DType::f32));
}

bool Optimizer::decays(const std::string& param_name) const {
  for (std::size_t i = 0; i < params_.entries().size(); ++i)
    if (params_.entries()[i].name == param_name) return decay_[i];
  throw Error(str("optimizer: no parameter named ", param_name));
}

void Optimizer::step(double lr) {
  NoGradGuard no_grad;
  ++steps_;
  // The whole shard in one kernel: the gaps between segments and the padding hold zeros in
  // every buffer, and an update of zeros leaves zeros.
  Tensor p = flat_slice(params_.values(), shard_);
  const Tensor g = flat_slice(params_.grads(), shard_);
  if (config_.name == OptimizerKind::adamw) {
    AdamWParams a;
    a.lr = lr;
    a.beta1 = config_.betas[0];
    a.beta2 = config_.betas[1];
    a.eps = config_.eps;
    a.weight_decay = config_.weight_decay;
    a.bias_correction1 = 1.0 - std::pow(config_.betas[0], static_cast<double>(steps_));
    a.bias_correction2 = 1.0 - std::pow(config_.betas[1], static_cast<double>(steps_));
    kernels::adamw_step().get(p.device().type, p.dtype())(p, g, exp_avg_, exp_avg_sq_, decay_ranges_, a);
  } else {
    kernels::sgd_step().get(p.device().type, p.dtype())(p, g, exp_avg_, decay_ranges_,
                                                        SgdParams{lr, config_.momentum, config_.weight_decay});
  }
}

std::map<std::string, Tensor> Optimizer::state(const std::function<Tensor(const Tensor&)>& gather) const {
  // The full flat buffer of one state buffer.
  auto full = [&](const Tensor& flat) -> Tensor {
    if (!sharded()) return flat;
    DARK_CHECK(gather, "optimizer state: this optimizer holds only the shard [", shard_.begin, ", ", shard_.end,
               ") of the ", params_.numel(), " parameter elements; state() needs a gather function that returns the "
               "full flat state buffer");
    Tensor all = gather(flat);
    DARK_CHECK(all.defined() && all.dim() == 1 && all.numel() == params_.numel() && all.dtype() == DType::f32,
               "optimizer state: gather returned ", all.defined() ? all.describe() : "an undefined tensor",
               ", expected f32[", params_.numel(), "]");
    return all;
  };
  const bool adam = config_.name == OptimizerKind::adamw;
  const Tensor m = full(exp_avg_), v = adam ? full(exp_avg_sq_) : Tensor();
  std::map<std::string, Tensor> out;
  for (const auto& e : params_.entries()) {
    const Shape& shape = e.param->shape();
    out[(adam ? "exp_avg." : "momentum.") + e.name] = core::reshape(ParameterBuffer::segment(m, e), shape);
    if (adam) out["exp_avg_sq." + e.name] = core::reshape(ParameterBuffer::segment(v, e), shape);
  }
  out["steps"] = Tensor::from_vector<std::int64_t>({steps_}, {1});
  return out;
}

void Optimizer::load_state(const std::map<std::string, Tensor>& state) {
  auto take = [&](const std::string& key) -> const Tensor& {
    auto it = state.find(key);
    DARK_CHECK(it != state.end(), "optimizer state: missing tensor '", key, "'");
    return it->second;
  };
  const bool adam = config_.name == OptimizerKind::adamw;
  for (const auto& e : params_.entries()) {
    const std::vector<std::pair<std::string, Tensor>> targets =
        adam ? std::vector<std::pair<std::string, Tensor>>{{"exp_avg." + e.name, exp_avg_}, {"exp_avg_sq." + e.name, exp_avg_sq_}}
             : std::vector<std::pair<std::string, Tensor>>{{"momentum." + e.name, exp_avg_}};
    for (const auto& [key, flat] : targets) {
      const Tensor& src = take(key);
      DARK_CHECK(src.shape() == e.param->shape(), "optimizer state: '", key, "' has shape ", shape_str(src.shape()),
                 ", parameter has ", shape_str(e.param->shape()));
      DARK_CHECK(src.dtype() == flat.dtype(), "optimizer state: '", key, "' is ", dtype_name(src.dtype()),
                 ", the optimizer keeps ", dtype_name(flat.dtype()));
      const FlatRange r = overlap(e, shard_);
      if (r.size() > 0) flat_slice(flat, r, shard_.begin).copy_(flat_slice(core::reshape(src, {e.numel}), r, e.offset));
    }
  }
  steps_ = take("steps").to(DType::i64).to_vector<std::int64_t>().at(0);
}

}  // namespace dark::nn
