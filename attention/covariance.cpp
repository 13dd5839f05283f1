// Second moments, Jacobi eigen-decomposition and whitening (see covariance.h).
#include "attention/covariance.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace dark::attention {

SecondMoments::SecondMoments(std::int64_t kv_heads, std::int64_t dim)
    : kv_heads_(kv_heads), dim_(dim), sums_(kv_heads, std::vector<double>(dim * dim, 0.0)) {}

void SecondMoments::add(const Tensor& x) {
  DARK_CHECK(x.dim() == 4 && x.size(3) == dim_ && x.size(2) % kv_heads_ == 0, "SecondMoments: expected (B, T, H, ",
             dim_, ") with H a multiple of ", kv_heads_, ", got ", x.describe());
  const std::int64_t heads = x.size(2), group = heads / kv_heads_, rows = x.size(0) * x.size(1);
  const std::vector<double> v = x.detach().to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
  for (std::int64_t row = 0; row < rows; ++row)
    for (std::int64_t h = 0; h < heads; ++h) {
      const double* xv = v.data() + (row * heads + h) * dim_;
      std::vector<double>& s = sums_[h / group];
      for (std::int64_t i = 0; i < dim_; ++i)
        for (std::int64_t j = 0; j < dim_; ++j) s[i * dim_ + j] += xv[i] * xv[j];
    }
  // Every key/value head receives `group` vectors per row from this call.
  count_ += rows * group;
}

std::vector<double> SecondMoments::moment(std::int64_t kv_head) const {
  DARK_CHECK(count_ > 0, "SecondMoments: nothing was measured (empty calibration)");
  std::vector<double> m = sums_.at(kv_head);
  for (double& x : m) x /= static_cast<double>(count_);
  return m;
}

std::vector<double> SecondMoments::pooled() const {
  std::vector<double> m(dim_ * dim_, 0.0);
  for (std::int64_t h = 0; h < kv_heads_; ++h) {
    const std::vector<double> one = moment(h);
    for (std::size_t i = 0; i < m.size(); ++i) m[i] += one[i] / static_cast<double>(kv_heads_);
  }
  return m;
}

SymmetricEigen symmetric_eigen(const std::vector<double>& input, std::int64_t d) {
  DARK_CHECK(static_cast<std::int64_t>(input.size()) == d * d, "symmetric_eigen: expected ", d, " x ", d, " values");
  std::vector<double> a = input, v(d * d, 0.0);
  for (std::int64_t i = 0; i < d; ++i) v[i * d + i] = 1.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, total = 0;
    for (std::int64_t i = 0; i < d; ++i)
      for (std::int64_t j = 0; j < d; ++j) (i == j ? total : off) += a[i * d + j] * a[i * d + j];
    if (off <= 1e-30 * (total + off) || off == 0) break;
    for (std::int64_t p = 0; p < d; ++p)
      for (std::int64_t q = p + 1; q < d; ++q) {
        const double apq = a[p * d + q];
        if (apq == 0) continue;
        // The rotation that zeroes a[p][q] (the smaller of the two angles, for stability).
        const double theta = (a[q * d + q] - a[p * d + p]) / (2 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (std::int64_t k = 0; k < d; ++k) {  // columns p, q
          const double akp = a[k * d + p], akq = a[k * d + q];
          a[k * d + p] = c * akp - s * akq;
          a[k * d + q] = s * akp + c * akq;
        }
        for (std::int64_t k = 0; k < d; ++k) {  // rows p, q
          const double apk = a[p * d + k], aqk = a[q * d + k];
          a[p * d + k] = c * apk - s * aqk;
          a[q * d + k] = s * apk + c * aqk;
        }
        for (std::int64_t k = 0; k < d; ++k) {
          const double vkp = v[k * d + p], vkq = v[k * d + q];
          v[k * d + p] = c * vkp - s * vkq;
          v[k * d + q] = s * vkp + c * vkq;
        }
      }
  }
  std::vector<std::int64_t> order(d);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](auto i, auto j) { return a[i * d + i] < a[j * d + j]; });
  SymmetricEigen out{std::vector<double>(d), std::vector<double>(d * d)};
  for (std::int64_t c = 0; c < d; ++c) {
    out.values[c] = a[order[c] * d + order[c]];
    for (std::int64_t k = 0; k < d; ++k) out.vectors[k * d + c] = v[k * d + order[c]];
  }
  return out;
}

std::vector<double> whitening_matrix(const std::vector<double>& lambda, std::int64_t d, std::int64_t rank) {
  DARK_CHECK(rank >= 1 && rank <= d, "whitening_matrix: rank ", rank, " outside [1, ", d, "]");
  const SymmetricEigen e = symmetric_eigen(lambda, d);
  double trace = 0;
  for (std::int64_t i = 0; i < d; ++i) trace += lambda[i * d + i];
  DARK_CHECK(trace > 0 && std::isfinite(trace), "whitening_matrix: the second moment has trace ", trace,
             " (no signal in the calibration batch)");
  const double floor = 1e-6 * trace / static_cast<double>(d);
  const double scale = std::sqrt(trace / static_cast<double>(rank));
  std::vector<double> m(rank * d);
  for (std::int64_t row = 0; row < rank; ++row) {
    const std::int64_t c = d - 1 - row;  // largest eigenvalues first
    const double w = scale / std::sqrt(std::max(e.values[c], floor));
    for (std::int64_t k = 0; k < d; ++k) m[row * d + k] = w * e.vectors[k * d + c];
  }
  return m;
}

std::vector<double> congruence(const std::vector<double>& a, const std::vector<double>& b, std::int64_t r,
                               std::int64_t d) {
  std::vector<double> ab(r * d, 0.0), out(r * r, 0.0);
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t k = 0; k < d; ++k)
      for (std::int64_t j = 0; j < d; ++j) ab[i * d + j] += a[i * d + k] * b[k * d + j];
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < r; ++j)
      for (std::int64_t k = 0; k < d; ++k) out[i * r + j] += ab[i * d + k] * a[j * d + k];
  return out;
}

}  // namespace dark::attention
