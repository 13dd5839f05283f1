// The attention-weight divergence (see attention_weights.h).
#include "train/swap/attention_weights.h"

#include <cmath>
#include <limits>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace dark::train {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// The smallest feature product kept (float64's normal range ends near 1e-308): a product
// below it, where no float64 sum could represent the weight, counts as this.
constexpr double kSmallestProduct = 1e-300;

// (B, T, H, X) -> (B, H, T, X) in float64, kv heads repeated for the query heads they serve.
Tensor heads_first(const Tensor& x, std::int64_t query_heads) {
  Tensor y = to_dtype(x, DType::f64);
  const std::int64_t B = y.size(0), T = y.size(1), H = y.size(2), X = y.size(3);
  if (H != query_heads) {
    const std::int64_t group = query_heads / H;
    y = reshape(expand(reshape(y, {B, T, H, 1, X}), {B, T, H, group, X}), {B, T, query_heads, X});
  }
  return permute(y, {0, 2, 1, 3});
}

// Which keys each sampled row weighs, (R, T) float64 0 / 1: every key it sees (`seen`), and
// among them the exact window's (`near`).
struct RowMasks {
  Tensor seen, near, far;
};

RowMasks row_masks(const std::vector<std::int64_t>& rows, std::int64_t T, std::int64_t exact_window,
                   std::int64_t layer_window, Device device) {
  const auto R = static_cast<std::int64_t>(rows.size());
  std::vector<double> seen(static_cast<std::size_t>(R * T)), near(seen.size()), far(seen.size());
  for (std::int64_t r = 0; r < R; ++r) {
    const std::int64_t i = rows[r];
    DARK_CHECK(i >= 0 && i < T, "attention weights: sampled row ", i, " outside [0, ", T, ")");
    for (std::int64_t j = 0; j <= i; ++j) {
      if (layer_window > 0 && i - j >= layer_window) continue;
      const bool is_near = i - j < exact_window;
      seen[r * T + j] = 1;
      (is_near ? near : far)[r * T + j] = 1;
    }
  }
  const auto tensor = [&](const std::vector<double>& v) { return Tensor::from_vector(v, {R, T}).to(device); };
  return {tensor(seen), tensor(near), tensor(far)};
}

Tensor negated(const Tensor& mask) { return sub(Tensor::full({1}, 1.0, DType::f64, mask.device()), mask); }

}  // namespace

Tensor attention_weight_divergence(attention::RandomFeatureAttention& kernel, const Tensor& q, const Tensor& k,
                                   const Tensor& q_source, const Tensor& k_source, const std::vector<std::int64_t>& rows) {
  DARK_CHECK(!rows.empty(), "attention weights: no sampled row");
  const std::int64_t T = q.size(1), Hq = q.size(2), D = q_source.size(3);
  const Device device = q.device();
  const Tensor index = Tensor::from_vector(rows, {static_cast<std::int64_t>(rows.size())}).to(device);
  const attention::ExactWindowSpec spec = kernel.exact_window();
  const bool exact_kernel = kernel.config().mode == attention::Mode::exact;
  // Without features (mode exact) every key the row sees is weighed exactly.
  const RowMasks masks = row_masks(rows, T, exact_kernel ? T : kernel.config().exact_window, spec.layer_window, device);
  const Tensor unseen = negated(masks.seen);

  // P: the source's exact weights (no gradient: the source is fixed).
  Tensor log_p;
  {
    NoGradGuard no_grad;
    const Tensor qs = heads_first(index_select(q_source, 1, index), Hq), ks = heads_first(k_source, Hq);
    const Tensor scores = mul_scalar(matmul(qs, ks, false, true), 1.0 / std::sqrt(static_cast<double>(D)));
    log_p = log_softmax(masked_fill(scores, unseen, -kInf), -1);
  }
  const Tensor p = exp(log_p);
  const Tensor p_log_p = sum(mul(p, masked_fill(log_p, unseen, 0.0)), {3});  // (B, H, R)

  // log w: the swapped kernel's unnormalised weights.
  const Tensor xq = kernel.transformed(index_select(q, 1, index)), xk = kernel.transformed(k);
  Tensor log_w = matmul(heads_first(xq, Hq), heads_first(xk, Hq), false, true);  // the exact kernel's logits
  Tensor log_eps;
  if (!exact_kernel) {
    const Tensor lq = heads_first(kernel.feature_logits(xq), Hq), lk = heads_first(kernel.feature_logits(xk), Hq);
    Tensor q_offset, k_offset;  // (B, H, R, 1), (B, H, T, 1): constants, as the kernel's offsets are
    {
      NoGradGuard no_grad;
      q_offset = max(lq, {3}, true);
      k_offset = max(lk, {3}, true);
    }
    const Tensor products = matmul(exp(sub(lq, q_offset)), exp(sub(lk, k_offset)), false, true);
    const Tensor log_far = add(add(log(maximum(products, Tensor::full({1}, kSmallestProduct, DType::f64, device))),
                                   q_offset),
                               transpose(k_offset, 2, 3));
    log_w = where(masks.near, log_w, log_far);
    // eps in the far part's offset units: eps exp(qoff_i + o_i), o_i the largest far-key logit.
    NoGradGuard no_grad;
    const Tensor far_max = max(masked_fill(expand(transpose(k_offset, 2, 3), log_far.shape()), negated(masks.far), -kInf),
                               {3}, true);
    log_eps = add(add_scalar(q_offset, std::log(kernel.config().eps)), far_max);  // -inf where no far key
  }
  log_w = masked_fill(log_w, unseen, -kInf);
  const Tensor log_z = logsumexp(log_eps.defined() ? concat({log_w, log_eps}, 3) : log_w, {3});  // (B, H, R)
  const Tensor cross = sum(mul(p, masked_fill(log_w, unseen, 0.0)), {3});
  return mean(add(sub(p_log_p, cross), log_z));
}

}  // namespace dark::train
