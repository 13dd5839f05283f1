// Random projections shared by Performer (FAVOR+), DARKFormer and LFK: the feature matrix
// Omega (m x d), iid Gaussian or block-orthogonal (exactly Haar-distributed blocks with
// chi_d row norms), drawn from Philox streams keyed by (seed, layer, head, redraw epoch),
// and the FAVOR+ logits Omega x - |x|^2 / 2 - ln(m) / 2 built from differentiable ops.
// See docs/method.md sections 2, 3 and 5.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace dark::attention {

// How the rows of Omega are drawn.
//   iid:        every entry N(0, 1) independently.
//   orthogonal: ceil(m / d) independent d x d Gaussian blocks, each turned into an exactly
//               Haar-distributed orthogonal matrix (Householder QR with the sign(diag R)
//               correction); each row is then scaled to a norm drawn independently (see
//               FeatureNorms); the last block keeps only the rows needed to reach m.
enum class FeatureDraw { iid, orthogonal };

// Row norms of orthogonal blocks (ignored for iid draws, whose rows already have chi_d norms).
//   chi:    the norm of a fresh d-dim standard Gaussian vector (its own Philox stream), so each
//           row is marginally N(0, I_d) and the FAVOR+ estimate stays unbiased (default).
//   sqrt_d: every row has norm sqrt(d) (deterministic; the estimate is then slightly biased).
enum class FeatureNorms { chi, sqrt_d };

// Identifies one draw. Every data-parallel rank that builds the same key gets the same bits.
// Mapping to Philox (core/philox.h): the Philox key is `seed`; the 64-bit stream id is
//   bit 63      = 1  (tags random-feature streams, apart from the small stream ids used
//                     elsewhere, e.g. parameter initialisation)
//   bits 60..62 = purpose (0: the Gaussian entries / blocks, 1: the chi_d row norms)
//   bits 46..59 = layer   (0 <= layer < 2^14)
//   bits 32..45 = head    (0 <= head  < 2^14)
//   bits  0..31 = epoch   (0 <= epoch < 2^32, the redraw counter)
// Distinct (layer, head, epoch, purpose) therefore give disjoint Philox counter ranges, i.e.
// independent draws; out-of-range fields are an error rather than a silent collision.
struct FeatureKey {
  std::uint64_t seed = 0;
  int layer = 0;
  int head = 0;
  std::int64_t epoch = 0;
};

// Purposes of the streams a key owns (bits 60..62 of the stream id).
enum class FeatureStream : std::uint64_t { gaussian = 0, norms = 1 };

// The Philox stream id for (key, purpose), as documented on FeatureKey.
std::uint64_t feature_stream(const FeatureKey& key, FeatureStream purpose);

// Omega (m x d) on the CPU in `dtype` (f32, f64 or bf16). Orthogonal blocks are computed in
// double and rounded once; iid entries are Philox normals (computed in double by the fill,
// so the f32 and f64 draws of one key agree up to rounding).
Tensor draw_features(std::int64_t m, std::int64_t d, FeatureDraw draw, const FeatureKey& key,
                     DType dtype = DType::f32, FeatureNorms norms = FeatureNorms::chi);

// In place: a (d x d, row-major) becomes the Q of its Householder QR a = Q R, computed in
// double. With sign_correction (the default) column j of Q is multiplied by sign(R_jj), which
// makes R's diagonal positive and the factorisation unique, so that for Gaussian `a` the
// result is exactly Haar distributed on O(d). Without it, Q's diagonal is biased (kept only so
// tests can show the bias). Columns of a zero-norm pivot (probability 0 for Gaussian input)
// are left as the identity's.
void householder_q(std::vector<double>& a, std::int64_t d, bool sign_correction = true);

// FAVOR+ logits: x (..., d), already scaled by the caller (x~ = d^(-1/4) x; for DARKFormer
// x = M x~), omega (m x d), same dtype and device -> (..., m) with
//   logits = Omega x - |x|^2 / 2 - ln(m) / 2,
// so that phi(x) = exp(logits) = m^(-1/2) exp(Omega x - |x|^2 / 2) and
// E[phi(q) . phi(k)] = exp(q . k). Built from differentiable ops (matmul, square, sum,
// add_scalar): gradients reach x, and omega when it requires grad (LFK). The stabilising
// offsets of method.md section 5 are the linear-attention op's job, not this function's.
Tensor favor_logits(const Tensor& x, const Tensor& omega);

}  // namespace dark::attention
