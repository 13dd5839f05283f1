// Variance-optimal proposal (see variance_optimal.h).
#include "attention/variance_optimal.h"

#include <cmath>

#include "attention/covariance.h"
#include "core/error.h"

namespace dark::attention {

ImportanceProposal variance_optimal_proposal(const std::vector<double>& lambda, std::int64_t dim,
                                             const std::string& where) {
  const SymmetricEigen e = symmetric_eigen(lambda, dim);
  const double largest = e.values.back();
  DARK_CHECK(largest < 0.5, where, ": proposal variance_optimal needs every eigenvalue of the second moment Lambda of ",
             "the transformed queries and keys below 1/2, but the largest is ", largest,
             "; (I + 2 Lambda)(I - 2 Lambda)^-1 does not exist. Use attention.proposal \"isotropic\" here");
  ImportanceProposal p{dim, std::vector<double>(dim * dim, 0.0), 0.0};
  for (std::int64_t c = 0; c < dim; ++c) {
    const double l = std::max(e.values[c], 0.0);  // a second moment is PSD; clip rounding
    const double variance = (1 + 2 * l) / (1 - 2 * l);
    p.log_det += std::log(variance);
    const double root = std::sqrt(variance);
    for (std::int64_t i = 0; i < dim; ++i)
      for (std::int64_t j = 0; j < dim; ++j)
        p.sqrt_cov[i * dim + j] += e.vectors[i * dim + c] * root * e.vectors[j * dim + c];
  }
  return p;
}

ProposalFeatures apply_proposal(const ImportanceProposal& proposal, const Tensor& g) {
  DARK_CHECK(g.dim() == 2 && g.size(1) == proposal.dim, "apply_proposal: g must be (m, ", proposal.dim, "), got ",
             g.describe());
  const std::int64_t m = g.size(0), d = proposal.dim;
  const std::vector<double> gv = g.to(DType::f64).contiguous().to_vector<double>();
  std::vector<double> omega(m * d, 0.0), half_log_weight(m, 0.0);
  for (std::int64_t f = 0; f < m; ++f) {
    double g2 = 0, w2 = 0;
    for (std::int64_t j = 0; j < d; ++j) {
      double s = 0;
      for (std::int64_t i = 0; i < d; ++i) s += gv[f * d + i] * proposal.sqrt_cov[i * d + j];
      omega[f * d + j] = s;
      w2 += s * s;
      g2 += gv[f * d + j] * gv[f * d + j];
    }
    half_log_weight[f] = 0.5 * (-0.5 * w2 + 0.5 * g2 + 0.5 * proposal.log_det);
  }
  return {Tensor::from_vector(omega, {m, d}).to(g.dtype()), Tensor::from_vector(half_log_weight, {m}).to(g.dtype())};
}

}  // namespace dark::attention
