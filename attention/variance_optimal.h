// The variance-optimal Gaussian proposal (the DARKFormer paper's Theorem 3.2; docs/method.md
// section 3). For transformed queries and keys with second moment Lambda (r x r), features
// are drawn as omega ~ N(0, C*) with C* = (I + 2 Lambda)(I - 2 Lambda)^-1 instead of N(0, I),
// and each feature is multiplied by the square root of the density ratio
// w(omega) = N(omega; 0, I) / N(omega; 0, C*) on both the query and the key side. Then
// E_{omega ~ C*}[w phi(q) phi(k)] = E_{omega ~ I}[phi(q) phi(k)] = exp(q . k): the kernel is
// unchanged and the estimate stays unbiased, whatever Lambda was measured on; its variance is
// lowest when the data match Lambda. C* exists only while every eigenvalue of Lambda < 1/2.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace dark::attention {

struct ImportanceProposal {
  std::int64_t dim = 0;
  std::vector<double> sqrt_cov;  // C*^(1/2), dim x dim, symmetric
  double log_det = 0;            // log det C*
};

// C* from Lambda (dim x dim). Throws when an eigenvalue of Lambda is >= 1/2, naming `where`
// and the eigenvalue.
ImportanceProposal variance_optimal_proposal(const std::vector<double>& lambda, std::int64_t dim,
                                             const std::string& where);

struct ProposalFeatures {
  Tensor omega;            // (m, dim) = g C*^(1/2): rows ~ N(0, C*) when g's rows ~ N(0, I)
  Tensor half_log_weight;  // (m) = log w(omega) / 2, added to both sides' feature logits
};
// g: (m, dim) isotropic draws (iid or orthogonal with chi norms), any float dtype; results
// in g's dtype. With omega = C^(1/2) g: log w = -|omega|^2 / 2 + |g|^2 / 2 + log det C / 2.
ProposalFeatures apply_proposal(const ImportanceProposal& proposal, const Tensor& g);

}  // namespace dark::attention
