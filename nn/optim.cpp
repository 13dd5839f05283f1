// AdamW and SGD (see optim.h).
#include "nn/optim.h"

#include <fnmatch.h>

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

Optimizer::Optimizer(ParameterBuffer& params, OptimizerConfig config) : params_(params), config_(std::move(config)) {
  DARK_CHECK(config_.name == "adamw" || config_.name == "sgd", "optimizer: unknown name '", config_.name,
             "' (allowed: adamw, sgd)");
  for (const auto& e : params_.entries()) decay_.push_back(!matches_any(e.name, config_.no_decay));
  exp_avg_ = Tensor::zeros({params_.numel()}, DType::f32, params_.values().device());
  if (config_.name == "adamw") exp_avg_sq_ = Tensor::zeros({params_.numel()}, DType::f32, params_.values().device());
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
    const auto& e = entries[i];
    Tensor p = ParameterBuffer::segment(params_.values(), e);
    const Tensor g = ParameterBuffer::segment(params_.grads(), e);
    Tensor m = ParameterBuffer::segment(exp_avg_, e);
    const double wd = decay_[i] ? config_.weight_decay : 0.0;
    if (config_.name == "adamw") {
      Tensor v = ParameterBuffer::segment(exp_avg_sq_, e);
      AdamWParams a;
      a.lr = lr;
      a.beta1 = config_.beta1;
      a.beta2 = config_.beta2;
      a.eps = config_.eps;
      a.weight_decay = wd;
      a.bias_correction1 = 1.0 - std::pow(config_.beta1, static_cast<double>(steps_));
      a.bias_correction2 = 1.0 - std::pow(config_.beta2, static_cast<double>(steps_));
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

std::map<std::string, Tensor> Optimizer::state() const {
  std::map<std::string, Tensor> out;
  const bool adam = config_.name == "adamw";
  for (const auto& e : params_.entries()) {
    const Shape& shape = e.param->shape();
    out[(adam ? "exp_avg." : "momentum.") + e.name] = core::reshape(ParameterBuffer::segment(exp_avg_, e), shape);
    if (adam) out["exp_avg_sq." + e.name] = core::reshape(ParameterBuffer::segment(exp_avg_sq_, e), shape);
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
  const bool adam = config_.name == "adamw";
  for (const auto& e : params_.entries()) {
    const std::vector<std::pair<std::string, Tensor>> targets =
        adam ? std::vector<std::pair<std::string, Tensor>>{{"exp_avg." + e.name, exp_avg_}, {"exp_avg_sq." + e.name, exp_avg_sq_}}
             : std::vector<std::pair<std::string, Tensor>>{{"momentum." + e.name, exp_avg_}};
    for (const auto& [key, flat] : targets) {
      const Tensor& src = take(key);
      DARK_CHECK(src.shape() == e.param->shape(), "optimizer state: '", key, "' has shape ", shape_str(src.shape()),
                 ", parameter has ", shape_str(e.param->shape()));
      Tensor dst = core::reshape(ParameterBuffer::segment(flat, e), e.param->shape());
      dst.copy_(src);
    }
  }
  steps_ = take("steps").to(DType::i64).to_vector<std::int64_t>().at(0);
}

}  // namespace dark::nn
