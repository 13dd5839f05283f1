// The attention-weight divergence (see attention_weights.h).
#include "train/swap/attention_weights.h"

#include <cmath>
#include <limits>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace dark::train {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// The smallest feature product kept, in the inputs' dtype (float32's normal range ends near
// 1e-38): a weight more than ~69 nats below its row's and key's largest features counts as
// this, so that its log stays finite.
double smallest_product(DType dtype) { return dtype == DType::f64 ? 1e-300 : 1e-30; }

// Grouped-query attention without repeating the keys for every query head: query rows
// (B, R, Hq, X) -> (B, Hkv, group R, X), keys (B, T, Hkv, X) -> (B, Hkv, T, X); a product of
// the two, (B, Hkv, group R, T), is (B, Hq, R, T) by reshape (query head h reads kv head
// h / group).
Tensor query_rows_by_kv_head(const Tensor& x, std::int64_t kv_heads) {
  const Tensor y = permute(x, {0, 2, 1, 3});  // (B, Hq, R, X)
  return reshape(y, {y.size(0), kv_heads, y.size(1) / kv_heads * y.size(2), y.size(3)});
}
Tensor keys_by_kv_head(const Tensor& x) { return permute(x, {0, 2, 1, 3}); }
// (B, Hkv, group R, T) -> (B, Hq, R, T).
Tensor per_query_head(const Tensor& x, std::int64_t query_heads) {
  return reshape(x, {x.size(0), query_heads, x.size(2) * x.size(1) / query_heads, x.size(3)});
}

// Which keys each sampled row weighs, (R, T) float64 0 / 1: every key it sees (`seen`), and
// among them the exact window's (`near`).
struct RowMasks {
  Tensor seen, near, far;
};

RowMasks row_masks(const std::vector<std::int64_t>& rows, std::int64_t T, std::int64_t exact_window,
                   std::int64_t layer_window, DType dtype, Device device) {
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
  const auto tensor = [&](const std::vector<double>& v) { return Tensor::from_vector(v, {R, T}).to(dtype).to(device); };
  return {tensor(seen), tensor(near), tensor(far)};
}

Tensor negated(const Tensor& mask) { return sub(Tensor::full({1}, 1.0, mask.dtype(), mask.device()), mask); }

}  // namespace

Tensor attention_weight_divergence(attention::RandomFeatureAttention& kernel, const Tensor& q, const Tensor& k,
                                   const Tensor& q_source, const Tensor& k_source, const std::vector<std::int64_t>& rows) {
  DARK_CHECK(!rows.empty(), "attention weights: no sampled row");
  const std::int64_t T = q.size(1), Hq = q.size(2), D = q_source.size(3);
  const Device device = q.device();
  const DType dtype = q.dtype();
  const Tensor index = Tensor::from_vector(rows, {static_cast<std::int64_t>(rows.size())}).to(device);
  const attention::ExactWindowSpec spec = kernel.exact_window();
  // Without features (mode exact) every key the row sees is weighed exactly. A window-only
  // layer (attention.far_field none) sees only its window's keys, and so does its P here: the
  // source's weights renormalised over them (over every key, the far ones would make the
  // divergence infinite).
  const bool window_only = kernel.window_only();
  const bool exact_kernel = kernel.config().mode == attention::Mode::exact || window_only;
  const RowMasks masks = row_masks(rows, T, exact_kernel ? T : kernel.config().exact_window,
                                   window_only ? spec.near() : spec.layer_window, dtype, device);
  const Tensor unseen = negated(masks.seen);

  // P: the source's exact weights (no gradient: the source is fixed).
  Tensor log_p;
  {
    NoGradGuard no_grad;
    const std::int64_t Hkv = k_source.size(2);
    const Tensor scores = mul_scalar(
        per_query_head(matmul(query_rows_by_kv_head(index_select(q_source, 1, index), Hkv), keys_by_kv_head(k_source),
                              false, true),
                       Hq),
        1.0 / std::sqrt(static_cast<double>(D)));
    log_p = log_softmax(masked_fill(scores, unseen, -kInf), -1);
  }
  const Tensor p = exp(log_p);
  const Tensor p_log_p = sum(mul(p, masked_fill(log_p, unseen, 0.0)), {3});  // (B, H, R)

  // log w: the swapped kernel's unnormalised weights.
  const std::int64_t Hkv = k.size(2);
  const Tensor xq = kernel.transformed(index_select(q, 1, index)), xk = kernel.transformed(k);
  // The exact kernel's logits.
  Tensor log_w = per_query_head(matmul(query_rows_by_kv_head(xq, Hkv), keys_by_kv_head(xk), false, true), Hq);
  Tensor log_eps;
  if (!exact_kernel) {
    const Tensor lq = query_rows_by_kv_head(kernel.feature_logits(xq), Hkv);
    const Tensor lk = keys_by_kv_head(kernel.feature_logits(xk));
    Tensor q_offset, k_offset;  // (B, Hkv, group R, 1), (B, Hkv, T, 1): constants, as the kernel's offsets are
    {
      NoGradGuard no_grad;
      q_offset = max(lq, {3}, true);
      k_offset = max(lk, {3}, true);
    }
    const Tensor products = matmul(exp(sub(lq, q_offset)), exp(sub(lk, k_offset)), false, true);
    const Tensor log_far = per_query_head(
        add(add(log(maximum(products, Tensor::full({1}, smallest_product(dtype), dtype, device))), q_offset),
            transpose(k_offset, 2, 3)),
        Hq);
    const Tensor q_offset_rows = per_query_head(q_offset, Hq);  // (B, Hq, R, 1)
    const Tensor k_offset_keys = per_query_head(
        expand(transpose(k_offset, 2, 3), {k_offset.size(0), Hkv, q_offset.size(2), k_offset.size(2)}), Hq);
    log_w = where(masks.near, log_w, log_far);
    // eps in the far part's offset units: eps exp(qoff_i + o_i), o_i the largest far-key logit.
    NoGradGuard no_grad;
    const Tensor far_max = max(masked_fill(k_offset_keys, negated(masks.far), -kInf), {3}, true);
    log_eps = add(add_scalar(q_offset_rows, std::log(kernel.config().eps)), far_max);  // -inf where no far key
  }
  log_w = masked_fill(log_w, unseen, -kInf);
  const Tensor log_z = logsumexp(log_eps.defined() ? concat({log_w, log_eps}, 3) : log_w, {3});  // (B, H, R)
  const Tensor cross = sum(mul(p, masked_fill(log_w, unseen, 0.0)), {3});
  return mean(add(sub(p_log_p, cross), log_z));
}

}  // namespace dark::train
