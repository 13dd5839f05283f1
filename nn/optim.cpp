// AdamW and SGD (see optim.h).
#include "nn/optim.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/kernels.h"

namespace dark::nn {

bool matches_any(const std::string& name, const std::vector<std::string>& patterns) {
  for (const std::string& p : patterns)
    if (fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  return false;
}

double clip_factor(double grad_norm, double max_norm) {
  return max_norm > 0 && grad_norm > max_norm ? max_norm / grad_norm : 1.0;
}

Optimizer::Optimizer(ParameterBuffer& params, OptimizerConfig config, FlatRange shard)
    : params_(params), config_(std::move(config)), shard_(shard.empty() ? FlatRange{0, params.numel()} : shard) {
  DARK_CHECK(shard_.begin >= 0 && shard_.end <= params_.numel(), "optimizer: shard [", shard_.begin, ", ", shard_.end,
             ") lies outside the ", params_.numel(), "-element parameter buffer");
  for (const auto& e : params_.entries()) decay_.push_back(!matches_any(e.name, config_.no_decay));
  const Device device = params_.values().device();
  exp_avg_ = Tensor::zeros({shard_.size()}, DType::f32, device);
  if (config_.name == OptimizerKind::adamw) exp_avg_sq_ = Tensor::zeros({shard_.size()}, DType::f32, device);
}

std::int64_t Optimizer::state_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& [prefix, flat] : buffers()) bytes += flat.numel() * static_cast<std::int64_t>(dtype_size(flat.dtype()));
  return bytes;
}

std::vector<std::pair<std::string, Tensor>> Optimizer::buffers() const {
  if (config_.name == OptimizerKind::adamw) return {{"exp_avg.", exp_avg_}, {"exp_avg_sq.", exp_avg_sq_}};
  return {{"momentum.", exp_avg_}};
}

bool Optimizer::decays(const std::string& param_name) const {
  for (std::size_t i = 0; i < params_.entries().size(); ++i)
    if (params_.entries()[i].name == param_name) return decay_[i];
  throw Error(str("optimizer: no parameter named ", param_name));
}

void Optimizer::step(double lr) {
  NoGradGuard no_grad;
  ++steps_;
  const auto& entries = params_.entries();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    // The part of the parameter's segment inside the shard (all of it when unsharded); the
    // update is element-wise, so a parameter cut by a shard boundary updates in two pieces.
    const std::int64_t begin = std::max(entries[i].offset, shard_.begin);
    const std::int64_t end = std::min(entries[i].offset + entries[i].numel, shard_.end);
    if (begin >= end) continue;
    Tensor p = core::slice(params_.values(), 0, begin, end);
    const Tensor g = core::slice(params_.grads(), 0, begin, end);
    Tensor m = core::slice(exp_avg_, 0, begin - shard_.begin, end - shard_.begin);
    const double wd = decay_[i] ? config_.weight_decay : 0.0;
    if (config_.name == OptimizerKind::adamw) {
      Tensor v = core::slice(exp_avg_sq_, 0, begin - shard_.begin, end - shard_.begin);
      AdamWParams a;
      a.lr = lr;
      a.beta1 = config_.betas[0];
      a.beta2 = config_.betas[1];
      a.eps = config_.eps;
      a.weight_decay = wd;
      a.bias_correction1 = 1.0 - std::pow(config_.betas[0], static_cast<double>(steps_));
      a.bias_correction2 = 1.0 - std::pow(config_.betas[1], static_cast<double>(steps_));
      kernels::adamw_step().get(p.device().type, p.dtype())(p, g, m, v, a);
    } else {
      // SGD: buf = momentum * buf + g (+ wd p); p -= lr * buf.
      Tensor update = wd != 0.0 ? add(g, mul_scalar(p, wd)) : g;
      if (config_.momentum != 0.0) {
        m.copy_(add(mul_scalar(m, config_.momentum), update));
        update = m;
      }
      p.copy_(sub(p, mul_scalar(update, lr)));
    }
  }
}

std::map<std::string, Tensor> Optimizer::state(const std::function<Tensor(const Tensor&)>& gather) const {
  DARK_CHECK(!sharded() || gather, "optimizer: state() of an optimizer sharded over ranks (ZeRO-1) needs a gather "
                                   "function: checkpoints hold the whole state");
  std::map<std::string, Tensor> out;
  for (const auto& [prefix, mine] : buffers()) {
    const Tensor flat = sharded() ? gather(mine) : mine;
    DARK_CHECK(flat.numel() == params_.numel(), "optimizer: gathered state has ", flat.numel(),
               " elements, the parameter buffer ", params_.numel());
    for (const auto& e : params_.entries())
      out[prefix + e.name] = core::reshape(ParameterBuffer::segment(flat, e), e.param->shape());
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
  for (const auto& [prefix, mine] : buffers()) {
    for (const auto& e : params_.entries()) {
      const std::string key = prefix + e.name;
      const Tensor& src = take(key);
      DARK_CHECK(src.shape() == e.param->shape(), "optimizer state: '", key, "' has shape ", shape_str(src.shape()),
                 ", parameter has ", shape_str(e.param->shape()));
      DARK_CHECK(src.dtype() == mine.dtype(), "optimizer state: '", key, "' is ", dtype_name(src.dtype()),
                 ", the optimizer keeps ", dtype_name(mine.dtype()));
      // The part of the parameter inside this optimizer's shard.
      const std::int64_t begin = std::max(e.offset, shard_.begin), end = std::min(e.offset + e.numel, shard_.end);
      if (begin >= end) continue;
      Tensor dst = core::slice(mine, 0, begin - shard_.begin, end - shard_.begin);
      dst.copy_(core::slice(core::reshape(src.contiguous(), {e.numel}), 0, begin - e.offset, end - e.offset));
    }
  }
  steps_ = take("steps").to(DType::i64).to_vector<std::int64_t>().at(0);
}

}  // namespace dark::nn
