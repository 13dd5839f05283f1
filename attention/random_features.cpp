// Random feature matrices (iid / block-orthogonal with exact Haar blocks and chi_d norms)
// drawn from keyed Philox streams, and the differentiable FAVOR+ logits.
#include "attention/random_features.h"

#include <cmath>

#include "autograd/ops.h"
#include "core/error.h"

namespace dark::attention {

std::uint64_t feature_stream(const FeatureKey& key, FeatureStream purpose) {
  DARK_CHECK(key.layer >= 0 && key.layer < (1 << 14), "feature_stream: layer ", key.layer,
             " outside [0, 16384)");
  DARK_CHECK(key.head >= 0 && key.head < (1 << 14), "feature_stream: head ", key.head,
             " outside [0, 16384)");
  DARK_CHECK(key.epoch >= 0 && key.epoch < (std::int64_t{1} << 32), "feature_stream: epoch ",
             key.epoch, " outside [0, 2^32)");
  return (std::uint64_t{1} << 63) | (static_cast<std::uint64_t>(purpose) << 60) |
         (static_cast<std::uint64_t>(key.layer) << 46) | (static_cast<std::uint64_t>(key.head) << 32) |
         static_cast<std::uint64_t>(key.epoch);
}

void householder_q(std::vector<double>& a, std::int64_t d, bool sign_correction) {
  DARK_CHECK(d >= 1 && static_cast<std::int64_t>(a.size()) == d * d, "householder_q: expected ",
             d, " x ", d, " values, got ", a.size());
  std::vector<double>& r = a;  // reduced to R in place; Q is rebuilt below
  std::vector<std::vector<double>> reflectors(d);  // v_k over rows k..d-1 (empty: no reflection)
  std::vector<double> rdiag(d, 0.0);
  for (std::int64_t k = 0; k < d; ++k) {
    double norm2 = 0;
    for (std::int64_t i = k; i < d; ++i) norm2 += r[i * d + k] * r[i * d + k];
    if (norm2 == 0) continue;
    const double norm = std::sqrt(norm2);
    // alpha has the opposite sign of the pivot, so v_0 = x_0 - alpha never cancels.
    const double alpha = r[k * d + k] >= 0 ? -norm : norm;
    std::vector<double> v(d - k);
    for (std::int64_t i = k; i < d; ++i) v[i - k] = r[i * d + k];
    v[0] -= alpha;
    double vnorm2 = 0;
    for (double x : v) vnorm2 += x * x;
    const double scale = 2.0 / vnorm2;
    for (std::int64_t j = k; j < d; ++j) {
      double s = 0;
      for (std::int64_t i = k; i < d; ++i) s += v[i - k] * r[i * d + j];
      s *= scale;
      for (std::int64_t i = k; i < d; ++i) r[i * d + j] -= s * v[i - k];
    }
    rdiag[k] = alpha;
    reflectors[k] = std::move(v);
  }
  // Q = H_0 H_1 ... H_{d-1}: apply the reflectors to the identity, last one first.
  std::vector<double> q(d * d, 0.0);
  for (std::int64_t i = 0; i < d; ++i) q[i * d + i] = 1.0;
  for (std::int64_t k = d - 1; k >= 0; --k) {
    const std::vector<double>& v = reflectors[k];
    if (v.empty()) continue;
    double vnorm2 = 0;
    for (double x : v) vnorm2 += x * x;
    const double scale = 2.0 / vnorm2;
    for (std::int64_t j = 0; j < d; ++j) {
      double s = 0;
      for (std::int64_t i = k; i < d; ++i) s += v[i - k] * q[i * d + j];
      s *= scale;
      for (std::int64_t i = k; i < d; ++i) q[i * d + j] -= s * v[i - k];
    }
  }
  // Q diag(sign(R_jj)) with R_jj > 0 afterwards: the unique QR, Haar for Gaussian input.
  if (sign_correction) {
    for (std::int64_t j = 0; j < d; ++j) {
      if (rdiag[j] >= 0) continue;
      for (std::int64_t i = 0; i < d; ++i) q[i * d + j] = -q[i * d + j];
    }
  }
  a = std::move(q);
}

Tensor draw_features(std::int64_t m, std::int64_t d, FeatureDraw draw, const FeatureKey& key,
                     DType dtype, FeatureNorms norms) {
  DARK_CHECK(m >= 1 && d >= 1, "draw_features: need m >= 1 and d >= 1, got m = ", m, ", d = ", d);
  DARK_CHECK(dtype == DType::f32 || dtype == DType::f64 || dtype == DType::bf16,
             "draw_features: dtype must be f32, f64 or bf16, got ", dtype_name(dtype));
  const std::uint64_t gaussian_stream = feature_stream(key, FeatureStream::gaussian);
  if (draw == FeatureDraw::iid) {
    return Tensor::randn({m, d}, key.seed, gaussian_stream, DType::f64).to(dtype);
  }
  const std::int64_t blocks = (m + d - 1) / d;
  const std::vector<double> gaussian =
      Tensor::randn({blocks, d, d}, key.seed, gaussian_stream, DType::f64).to_vector<double>();
  std::vector<double> row_norm(m, std::sqrt(static_cast<double>(d)));
  if (norms == FeatureNorms::chi) {
    const std::vector<double> g =
        Tensor::randn({m, d}, key.seed, feature_stream(key, FeatureStream::norms), DType::f64)
            .to_vector<double>();
    for (std::int64_t i = 0; i < m; ++i) {
      double s = 0;
      for (std::int64_t j = 0; j < d; ++j) s += g[i * d + j] * g[i * d + j];
      row_norm[i] = std::sqrt(s);
    }
  }
  std::vector<double> omega(m * d);
  for (std::int64_t b = 0; b < blocks; ++b) {
    std::vector<double> q(gaussian.begin() + b * d * d, gaussian.begin() + (b + 1) * d * d);
    householder_q(q, d);
    // Rows of the block are the columns of Q (Q^T is Haar as well).
    for (std::int64_t i = 0; i < d && b * d + i < m; ++i) {
      const std::int64_t row = b * d + i;
      for (std::int64_t j = 0; j < d; ++j) omega[row * d + j] = q[j * d + i] * row_norm[row];
    }
  }
  return Tensor::from_vector(omega, {m, d}).to(dtype);
}

Tensor favor_logits(const Tensor& x, const Tensor& omega) {
  DARK_CHECK(x.defined() && omega.defined(), "favor_logits: undefined input");
  DARK_CHECK(omega.dim() == 2, "favor_logits: omega must be (m, d), got ", omega.describe());
  DARK_CHECK(x.dim() >= 1 && x.size(-1) == omega.size(1), "favor_logits: x ", x.describe(),
             " does not end in d = ", omega.size(1), " of omega ", omega.describe());
  DARK_CHECK(x.dtype() == omega.dtype() && x.device() == omega.device(), "favor_logits: x ",
             x.describe(), " and omega ", omega.describe(), " differ in dtype or device");
  const std::int64_t d = omega.size(1), m = omega.size(0);
  const Tensor x2 = reshape(x, {-1, d});
  const Tensor proj = matmul(x2, omega, false, true);            // (N, m)
  const Tensor half_sq = mul_scalar(sum(square(x2), {1}, true), 0.5);  // (N, 1)
  Tensor logits = add_scalar(sub(proj, half_sq), -0.5 * std::log(static_cast<double>(m)));
  Shape out_shape(x.shape().begin(), x.shape().end() - 1);
  out_shape.push_back(m);
  return reshape(logits, out_shape);
}

}  // namespace dark::attention
