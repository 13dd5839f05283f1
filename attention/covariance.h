// Small dense symmetric linear algebra in double for the data-aware settings of the
// random-feature kinds: second moments of queries and keys, eigen-decomposition, and the
// whitening matrix of DARKFormer's "whiten" initialisation. Matrices are row-major
// std::vector<double> of d x d (or r x d) entries; d is a head dimension (<= a few hundred).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace dark::attention {

// Running uncentered second moments E[x x^T] of the scaled queries and keys per key/value
// head (a query head counts for the key/value head it reads). Uncentered on purpose: the
// estimator's variance exp(|M (q~ + k~)|^2) - 1 depends on the raw vectors, means included.
class SecondMoments {
 public:
  SecondMoments(std::int64_t kv_heads, std::int64_t dim);
  // x: (B, T, H, dim) with H a multiple of kv_heads (no gradient is taken).
  void add(const Tensor& x);
  bool empty() const { return count_ == 0; }
  std::int64_t dim() const { return dim_; }
  // The mean of x x^T over everything added for one key/value head, or pooled over all.
  std::vector<double> moment(std::int64_t kv_head) const;
  std::vector<double> pooled() const;

 private:
  std::int64_t kv_heads_, dim_;
  std::int64_t count_ = 0;  // vectors added per key/value head
  std::vector<std::vector<double>> sums_;
};

struct SymmetricEigen {
  std::vector<double> values;   // ascending
  std::vector<double> vectors;  // d x d row-major; column i is the eigenvector of values[i]
};
// Householder tridiagonalisation, then the implicit QL method (a must be symmetric): O(d^3),
// 0.03 s at d = 256 where cyclic Jacobi took 1 s (Gemma 3's heads; the probe calibrates
// several estimators per layer).
SymmetricEigen symmetric_eigen(const std::vector<double>& a, std::int64_t d);

// M (rank x d) with M Lambda M^T = (tr(Lambda) / rank) I over the top `rank` eigen-directions
// of Lambda: M = sqrt(tr(Lambda) / rank) diag(lambda_i^(-1/2)) U_rank^T. It equalises the
// eigenvalues of M Lambda M^T (which minimises the estimator's variance at a fixed kernel
// scale, docs/method.md section 3) and keeps the scale tr(M Lambda M^T) = tr(Lambda).
// Eigenvalues below 1e-6 tr(Lambda) / d are raised to that floor so near-null directions
// of a small calibration batch do not blow up.
std::vector<double> whitening_matrix(const std::vector<double>& lambda, std::int64_t d, std::int64_t rank);

// a (r x d) b (d x d) a^T -> r x r.
std::vector<double> congruence(const std::vector<double>& a, const std::vector<double>& b, std::int64_t r,
                               std::int64_t d);

}  // namespace dark::attention
