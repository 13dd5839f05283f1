// DARKFormer attention (see darkformer_attention.h).
#include "attention/darkformer_attention.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/init.h"

namespace dark::attention {

namespace {
// The identity initialisation of one M (r x d), row-major double.
std::vector<double> identity_init(std::int64_t r, std::int64_t d, const AttentionConfig& c, int layer, std::int64_t index) {
  std::vector<double> m(r * d, 0.0);
  if (r == d) {
    for (std::int64_t i = 0; i < d; ++i) m[i * d + i] = 1.0;
    return m;
  }
  const std::string name = str("model.layers.", layer, ".self_attn.feature_map.M.", index);
  std::vector<double> q = Tensor::randn({d, d}, c.seed, nn::name_stream(name), DType::f64).to_vector<double>();
  householder_q(q, d);
  const double scale = std::sqrt(static_cast<double>(d) / static_cast<double>(r));
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < d; ++j) m[i * d + j] = scale * q[j * d + i];  // rows = columns of Q
  return m;
}
}  // namespace

DarkformerAttention::DarkformerAttention(const nn::AttentionShape& shape, const AttentionConfig& config)
    : RandomFeatureAttention(shape, config) {
  const std::int64_t count = config.darkformer.scope == MatrixScope::head ? shape.n_kv_heads : 1, d = shape.head_dim;
  std::vector<double> values;
  for (std::int64_t i = 0; i < count; ++i) {
    const std::vector<double> one = identity_init(rank_, d, config_, shape.layer, i);
    values.insert(values.end(), one.begin(), one.end());
  }
  matrix = &register_parameter("M", Tensor::from_vector(values, {count, rank_, d}).to(shape.dtype));
}

bool DarkformerAttention::needs_calibration() const {
  return config_.darkformer.init == MatrixInit::whiten || RandomFeatureAttention::needs_calibration();
}

Tensor DarkformerAttention::apply_transform(const Tensor& x, double scale) const {
  return per_head_project(x, mul_scalar(to_compute(*matrix), scale), shape_.n_kv_heads);
}

std::vector<double> DarkformerAttention::transform_matrix(std::int64_t kv_head) const {
  const std::int64_t index = matrix->size(0) == 1 ? 0 : kv_head;
  return core::slice(*matrix, 0, index, index + 1).to(DType::f64).contiguous().to_vector<double>();
}

void DarkformerAttention::calibrated(const SecondMoments& moments) {
  if (config_.darkformer.init != MatrixInit::whiten) return;
  const std::int64_t count = matrix->size(0), d = shape_.head_dim;
  std::vector<double> values;
  for (std::int64_t i = 0; i < count; ++i) {
    const std::vector<double> lambda = count == 1 ? moments.pooled() : moments.moment(i);
    const std::vector<double> m = whitening_matrix(lambda, d, rank_);
    values.insert(values.end(), m.begin(), m.end());
  }
  NoGradGuard no_grad;
  matrix->copy_(Tensor::from_vector(values, {count, rank_, d}).to(matrix->dtype()).to(matrix->device()));
}

}  // namespace dark::attention
