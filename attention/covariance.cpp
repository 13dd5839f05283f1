// Second moments, the symmetric eigen-decomposition and whitening (see covariance.h).
#include "attention/covariance.h"

#include <algorithm>
#include <cmath>
#include <limits>
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

namespace {

// Householder reduction of the symmetric a (d x d, row-major; overwritten) to tridiagonal T =
// Q^T a Q: diag (d) and off (d, off[i] couples i and i + 1, off[d - 1] = 0); returns Q^T
// (row-major, so that every update below is a pass over contiguous rows). Step k reflects
// x = a[k+1.., k] onto -sign(x_0) |x| e_0 with H = I - 2 v v^T, |v| = 1; on the trailing block S
// the update H S H = S - 2 v w^T - 2 w v^T with u = S v, w = u - (v . u) v.
std::vector<double> tridiagonalise(std::vector<double>& a, std::int64_t d, std::vector<double>& diag,
                                   std::vector<double>& off) {
  std::vector<double> qt(d * d, 0.0), v(d), u(d), sums(d);
  for (std::int64_t i = 0; i < d; ++i) qt[i * d + i] = 1.0;
  for (std::int64_t k = 0; k + 2 < d; ++k) {
    const std::int64_t n = d - k - 1;  // the trailing block's size, rows k + 1 ..
    double norm = 0;
    for (std::int64_t i = 0; i < n; ++i) norm += a[(k + 1 + i) * d + k] * a[(k + 1 + i) * d + k];
    norm = std::sqrt(norm);
    if (norm == 0) continue;  // already reduced
    const double x0 = a[(k + 1) * d + k], alpha = x0 > 0 ? -norm : norm;
    for (std::int64_t i = 0; i < n; ++i) v[i] = a[(k + 1 + i) * d + k];
    v[0] -= alpha;
    double vnorm = 0;
    for (std::int64_t i = 0; i < n; ++i) vnorm += v[i] * v[i];
    vnorm = std::sqrt(vnorm);
    if (vnorm == 0) continue;  // x is already -sign(x_0) |x| e_0
    for (std::int64_t i = 0; i < n; ++i) v[i] /= vnorm;
    double vu = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double* row = a.data() + (k + 1 + i) * d + k + 1;
      double t = 0;
      for (std::int64_t j = 0; j < n; ++j) t += row[j] * v[j];
      u[i] = t;
      vu += v[i] * t;
    }
    for (std::int64_t i = 0; i < n; ++i) u[i] -= vu * v[i];  // w
    for (std::int64_t i = 0; i < n; ++i) {
      double* row = a.data() + (k + 1 + i) * d + k + 1;
      for (std::int64_t j = 0; j < n; ++j) row[j] -= 2 * (v[i] * u[j] + u[i] * v[j]);
    }
    for (std::int64_t i = 0; i < n; ++i) a[(k + 1 + i) * d + k] = a[k * d + k + 1 + i] = 0;
    a[(k + 1) * d + k] = a[k * d + k + 1] = alpha;
    // Q <- Q H, i.e. Q^T <- H Q^T on rows k + 1 ..: row_i -= 2 v_i (sum_j v_j row_j).
    std::fill(sums.begin(), sums.end(), 0.0);
    for (std::int64_t j = 0; j < n; ++j) {
      const double* row = qt.data() + (k + 1 + j) * d;
      for (std::int64_t c = 0; c < d; ++c) sums[c] += v[j] * row[c];
    }
    for (std::int64_t i = 0; i < n; ++i) {
      double* row = qt.data() + (k + 1 + i) * d;
      for (std::int64_t c = 0; c < d; ++c) row[c] -= 2 * v[i] * sums[c];
    }
  }
  for (std::int64_t i = 0; i < d; ++i) {
    diag[i] = a[i * d + i];
    off[i] = i + 1 < d ? a[(i + 1) * d + i] : 0.0;
  }
  return qt;
}

// Eigenvalues of the tridiagonal (diag, off) by the implicit QL method with Wilkinson-style
// shifts, each plane rotation also applied to the rows i, i + 1 of zt (the eigenvector
// matrix's transpose); diag ends as the eigenvalues, zt's row i as the vector of diag[i].
void tridiagonal_ql(std::vector<double>& diag, std::vector<double>& off, std::vector<double>& zt, std::int64_t d) {
  const double eps = std::numeric_limits<double>::epsilon();
  for (std::int64_t l = 0; l < d; ++l) {
    for (int iteration = 0;; ++iteration) {
      std::int64_t m = l;
      for (; m + 1 < d; ++m) {  // the first negligible coupling at or after l
        const double scale = std::fabs(diag[m]) + std::fabs(diag[m + 1]);
        if (std::fabs(off[m]) <= eps * scale) break;
      }
      if (m == l) break;  // diag[l] has converged
      DARK_CHECK(iteration < 64, "symmetric_eigen: the QL iteration did not converge (a non-finite input?)");
      double g = (diag[l + 1] - diag[l]) / (2 * off[l]);
      double r = std::hypot(g, 1.0);
      g = diag[m] - diag[l] + off[l] / (g + std::copysign(r, g));
      double s = 1, c = 1, p = 0;
      std::int64_t i = m - 1;
      bool deflated = false;
      for (; i >= l; --i) {
        const double f = s * off[i], b = c * off[i];
        r = std::hypot(f, g);
        off[i + 1] = r;
        if (r == 0) {  // an underflowed coupling: the block splits here
          diag[i + 1] -= p;
          off[m] = 0;
          deflated = true;
          break;
        }
        s = f / r;
        c = g / r;
        g = diag[i + 1] - p;
        r = (diag[i] - g) * s + 2 * c * b;
        p = s * r;
        diag[i + 1] = g + p;
        g = c * r - b;
        double* zi = zt.data() + i * d;
        double* zn = zt.data() + (i + 1) * d;
        for (std::int64_t k = 0; k < d; ++k) {
          const double t = zn[k];
          zn[k] = s * zi[k] + c * t;
          zi[k] = c * zi[k] - s * t;
        }
      }
      if (deflated) continue;
      diag[l] -= p;
      off[l] = g;
      off[m] = 0;
    }
  }
}

}  // namespace

SymmetricEigen symmetric_eigen(const std::vector<double>& input, std::int64_t d) {
  DARK_CHECK(static_cast<std::int64_t>(input.size()) == d * d, "symmetric_eigen: expected ", d, " x ", d, " values");
  std::vector<double> a = input, diag(d), off(d);
  std::vector<double> zt = tridiagonalise(a, d, diag, off);
  tridiagonal_ql(diag, off, zt, d);
  std::vector<std::int64_t> order(d);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](auto i, auto j) { return diag[i] < diag[j]; });
  SymmetricEigen out{std::vector<double>(d), std::vector<double>(d * d)};
  for (std::int64_t c = 0; c < d; ++c) {
    out.values[c] = diag[order[c]];
    for (std::int64_t k = 0; k < d; ++k) out.vectors[k * d + c] = zt[order[c] * d + k];
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
