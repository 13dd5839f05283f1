// LFK attention (see lfk_attention.h).
#include "attention/lfk_attention.h"

#include "autograd/ops.h"

namespace dark::attention {

namespace {
AttentionConfig checked(AttentionConfig c) {
  DARK_CHECK(c.mode == Mode::linear, "attention kind lfk: mode \"exact\" is not defined (LFK estimates no fixed kernel)");
  DARK_CHECK(c.proposal == Proposal::isotropic, "attention kind lfk: proposal \"variance_optimal\" is not defined (W is learned)");
  c.darkformer.rank = 0;
  return c;
}
}  // namespace

LfkAttention::LfkAttention(const nn::AttentionShape& shape, const AttentionConfig& config)
    : RandomFeatureAttention(shape, checked(config)) {
  std::vector<Tensor> draws;
  for (std::int64_t h = 0; h < shape.n_kv_heads; ++h)
    draws.push_back(draw_features(config_.num_features, shape.head_dim, config_.lfk.init,
                                  FeatureKey{config_.seed, shape.layer, static_cast<int>(h), 0}, DType::f64));
  weight = &register_parameter(
      "W", core::reshape(concat(draws, 0), {shape.n_kv_heads, config_.num_features, shape.head_dim}).to(shape.dtype));
}

std::pair<Tensor, Tensor> LfkAttention::features(DType dtype, Device device) {
  const Tensor w = to_compute(*weight);
  DARK_CHECK(w.dtype() == dtype && w.device() == device, "attention kind lfk: W is ", w.describe(),
             " but the queries are ", dtype_name(dtype), " on ", device.to_string());
  return {w, Tensor()};
}

}  // namespace dark::attention
