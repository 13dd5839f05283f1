// One registry of op test cases with printable names, e.g. "softmax[3,7,33]". Each case
// builds its inputs (any dtype and device, from Philox) and applies one op. The same cases
// run as float64 gradchecks on the CPU (test_gradcheck.cpp) and on CUDA against the CPU
// (test_gpu_ops.cpp). Odd, non-power-of-two sizes are always included.
#pragma once
#include <cmath>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace dark::testing {

// How to draw one input.
struct InputSpec {
  Shape shape;
  enum Kind { normal, positive, away_from_zero, distinct } kind = normal;
  bool transposed = false;  // pass a non-contiguous (last two axes swapped) view
  bool differentiable = true;
  double scale = 1.0;  // multiplies the drawn values before they are rounded to the dtype
};

struct OpCase {
  std::string name;
  std::vector<InputSpec> inputs;
  std::function<Tensor(const std::vector<Tensor>&)> fn;
};

// gtest prints parameters with this (instead of raw bytes).
inline void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

// Draws the inputs of a case: values from Philox keyed by (seed, input index), shaped and
// shifted per spec, made float64 on the CPU and then converted to dtype / device.
inline std::vector<Tensor> make_inputs(const OpCase& c, DType dtype, Device device, std::uint64_t seed = 7) {
  NoGradGuard no_grad;
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    const InputSpec& spec = c.inputs[i];
    Shape drawn = spec.shape;
    if (spec.transposed) std::swap(drawn[drawn.size() - 2], drawn[drawn.size() - 1]);
    Tensor t = Tensor::randn(drawn, seed, i, DType::f64);
    if (spec.kind == InputSpec::positive) t = add_scalar(abs(t), 0.5);
    if (spec.kind == InputSpec::away_from_zero) t = add(t, mul_scalar(sub(ge(t, Tensor::scalar(0.0, DType::f64)), Tensor::scalar(0.5, DType::f64)), 0.4));
    if (spec.kind == InputSpec::distinct) {
      // a permutation of well-separated values (no ties for max / maximum)
      const std::int64_t n = t.numel();
      std::vector<double> v(n);
      for (std::int64_t k = 0; k < n; ++k) v[k] = 0.37 * static_cast<double>((k * 7919 + i * 31) % n) - 0.1 * n;
      t = Tensor::from_vector(v, drawn);
    }
    if (spec.scale != 1.0) t = mul_scalar(t, spec.scale);
    t = t.to(dtype).to(device);
    if (spec.transposed) t = core::transpose(t, -1, -2);
    out.push_back(t);
  }
  return out;
}

inline std::vector<OpCase> op_cases() {
  using S = InputSpec;
  std::vector<OpCase> cases;
  auto add_case = [&](std::string name, std::vector<InputSpec> inputs, std::function<Tensor(const std::vector<Tensor>&)> fn) {
    cases.push_back({std::move(name), std::move(inputs), std::move(fn)});
  };
  // binary, with broadcasting and non-contiguous operands
  add_case("add[3,5]+[5]", {{{3, 5}}, {{5}}}, [](auto& x) { return add(x[0], x[1]); });
  add_case("add[4,1,3]+[2,3]", {{{4, 1, 3}}, {{2, 3}}}, [](auto& x) { return add(x[0], x[1]); });
  add_case("sub[3,5]T-[3,5]", {{{3, 5}, S::normal, true}, {{3, 5}}}, [](auto& x) { return sub(x[0], x[1]); });
  add_case("mul[2,3,7]*[3,1]", {{{2, 3, 7}}, {{3, 1}}}, [](auto& x) { return mul(x[0], x[1]); });
  add_case("div[5,3]/[5,3]", {{{5, 3}}, {{5, 3}, S::positive}}, [](auto& x) { return div(x[0], x[1]); });
  add_case("div[1]/[4,3]T", {{{1}}, {{4, 3}, S::positive, true}}, [](auto& x) { return div(x[0], x[1]); });
  add_case("maximum[4,5]", {{{4, 5}, S::distinct}, {{4, 5}, S::normal}}, [](auto& x) { return maximum(x[0], x[1]); });
  add_case("minimum[4,5]", {{{4, 5}, S::distinct}, {{5}, S::normal}}, [](auto& x) { return minimum(x[0], x[1]); });
  add_case("pow[3,4]", {{{3, 4}, S::positive}, {{3, 4}}}, [](auto& x) { return pow(x[0], x[1]); });
  // unary
  const std::vector<std::pair<std::string, UnaryOp>> unary_ops = {
      {"neg", UnaryOp::neg}, {"exp", UnaryOp::exp}, {"tanh", UnaryOp::tanh}, {"sigmoid", UnaryOp::sigmoid},
      {"silu", UnaryOp::silu}, {"gelu", UnaryOp::gelu}, {"gelu_tanh", UnaryOp::gelu_tanh}, {"square", UnaryOp::square},
      {"sin", UnaryOp::sin}, {"cos", UnaryOp::cos}};
  for (const auto& [name, op] : unary_ops)
    add_case(name + "[7,33]", {{{7, 33}}}, [op = op](auto& x) { return unary(op, x[0]); });
  for (const auto& [name, op] : std::vector<std::pair<std::string, UnaryOp>>{
           {"log", UnaryOp::log}, {"sqrt", UnaryOp::sqrt}, {"rsqrt", UnaryOp::rsqrt}, {"reciprocal", UnaryOp::reciprocal}})
    add_case(name + "[5,9]T", {{{5, 9}, S::positive, true}}, [op = op](auto& x) { return unary(op, x[0]); });
  add_case("relu[6,7]", {{{6, 7}, S::away_from_zero}}, [](auto& x) { return relu(x[0]); });
  add_case("abs[6,7]", {{{6, 7}, S::away_from_zero}}, [](auto& x) { return abs(x[0]); });
  add_case("add_scalar[3,3]", {{{3, 3}}}, [](auto& x) { return add_scalar(x[0], 1.5); });
  add_case("mul_scalar[3,3]", {{{3, 3}}}, [](auto& x) { return mul_scalar(x[0], -2.5); });
  add_case("pow_scalar[3,5]", {{{3, 5}, S::positive}}, [](auto& x) { return pow_scalar(x[0], 1.7); });
  // reductions
  add_case("sum_all[3,5,7]", {{{3, 5, 7}}}, [](auto& x) { return sum(x[0]); });
  add_case("sum[3,5,7]ax1", {{{3, 5, 7}}}, [](auto& x) { return sum(x[0], {1}); });
  add_case("sum[3,5,7]ax0,2keep", {{{3, 5, 7}}}, [](auto& x) { return sum(x[0], {0, 2}, true); });
  add_case("mean[4,9]T ax-1", {{{4, 9}, S::normal, true}}, [](auto& x) { return mean(x[0], {-1}); });
  add_case("max[5,7]ax1", {{{5, 7}, S::distinct}}, [](auto& x) { return max(x[0], {1}); });
  add_case("min[6,5]ax0keep", {{{6, 5}, S::distinct}}, [](auto& x) { return min(x[0], {0}, true); });
  add_case("max[3,4,5]ax0,1", {{{3, 4, 5}, S::distinct}}, [](auto& x) { return max(x[0], {0, 1}); });
  add_case("logsumexp[6,33]ax1", {{{6, 33}}}, [](auto& x) { return logsumexp(x[0], {1}); });
  add_case("logsumexp[4,3,5]ax0keep", {{{4, 3, 5}}}, [](auto& x) { return logsumexp(x[0], {0}, true); });
  // softmax
  add_case("softmax[3,7,33]", {{{3, 7, 33}}}, [](auto& x) { return softmax(x[0], -1); });
  add_case("softmax[3,7,5]ax1", {{{3, 7, 5}}}, [](auto& x) { return softmax(x[0], 1); });
  add_case("log_softmax[5,17]", {{{5, 17}}}, [](auto& x) { return log_softmax(x[0], -1); });
  add_case("log_softmax[4,6]T", {{{4, 6}, S::normal, true}}, [](auto& x) { return log_softmax(x[0], -1); });
  // matmul
  add_case("matmul[5,7]x[7,3]", {{{5, 7}}, {{7, 3}}}, [](auto& x) { return matmul(x[0], x[1]); });
  add_case("matmul[7,5]^Tx[7,3]", {{{7, 5}}, {{7, 3}}}, [](auto& x) { return matmul(x[0], x[1], true);  });
  add_case("matmul[5,7]x[3,7]^T", {{{5, 7}}, {{3, 7}}}, [](auto& x) { return matmul(x[0], x[1], false, true); });
  add_case("matmul[7,5]^Tx[3,7]^T", {{{7, 5}}, {{3, 7}}}, [](auto& x) { return matmul(x[0], x[1], true, true); });
  add_case("matmul[2,5,7]Tx[7,3]", {{{2, 5, 7}, S::normal, true}, {{7, 3}}}, [](auto& x) { return matmul(x[0], x[1]); });
  add_case("matmul[3,1,4,5]x[2,5,6]", {{{3, 1, 4, 5}}, {{2, 5, 6}}}, [](auto& x) { return matmul(x[0], x[1]); });
  // linear: x weight^T, the weight differentiated as itself
  add_case("linear[5,7]x[3,7]^T", {{{5, 7}}, {{3, 7}}}, [](auto& x) { return linear(x[0], x[1]); });
  add_case("linear[5,7]Tx[3,7]^T", {{{5, 7}, S::normal, true}, {{3, 7}}}, [](auto& x) { return linear(x[0], x[1]); });
  // linear_group: weights apart (one product each) and side by side in one tensor (one batched product)
  add_case("linear_group[5,7]x[3,7]^T,[3,7]^T", {{{5, 7}}, {{3, 7}}, {{3, 7}}}, [](auto& x) {
    const std::vector<Tensor> y = linear_group(x[0], {x[1], x[2]});
    return add(y[0], mul(y[1], y[1]));
  });
  add_case("linear_group[5,7]Tx[3,2,7]", {{{5, 7}, S::normal, true}, {{3, 2, 7}}}, [](auto& x) {
    const auto w = [&x](std::int64_t i) { return reshape(slice(x[1], 0, i, i + 1), {2, 7}); };
    const std::vector<Tensor> y = linear_group(x[0], {w(0), w(1), w(2)});
    return add(add(y[0], mul(y[1], y[1])), mul_scalar(y[2], -0.5));
  });
  // per_head_matmul: a group of 2 heads per matrix, one matrix per head, one shared matrix
  add_case("per_head_matmul[2,3,4,5]x[2,6,5]", {{{2, 3, 4, 5}}, {{2, 6, 5}}}, [](auto& x) { return per_head_matmul(x[0], x[1]); });
  add_case("per_head_matmul[3,4,5]x[4,2,5]", {{{3, 4, 5}}, {{4, 2, 5}}}, [](auto& x) { return per_head_matmul(x[0], x[1]); });
  add_case("per_head_matmul[7,3,4]x[1,5,4]", {{{7, 3, 4}}, {{1, 5, 4}}}, [](auto& x) { return per_head_matmul(x[0], x[1]); });
  // views and layout
  add_case("reshape+permute[2,3,4]", {{{2, 3, 4}}},
           [](auto& x) { return mul(permute(reshape(x[0], {4, 3, 2}), {2, 0, 1}), permute(reshape(x[0], {4, 3, 2}), {2, 0, 1})); });
  add_case("slice[7,5]step2", {{{7, 5}}}, [](auto& x) { return square(slice(x[0], 0, 1, 7, 2)); });
  add_case("expand[3,1]->[3,4]", {{{3, 1}}}, [](auto& x) { return mul(expand(x[0], {2, 3, 4}), expand(x[0], {2, 3, 4})); });
  add_case("concat[2,3]+[4,3]", {{{2, 3}}, {{4, 3}, S::normal, true}}, [](auto& x) { return concat({x[0], x[1]}, 0); });
  add_case("split[3,7]", {{{3, 7}}}, [](auto& x) {
    auto parts = split(x[0], {2, 5}, 1);
    return concat({square(parts[1]), parts[0]}, 1);
  });
  add_case("cumsum[4,6]ax1", {{{4, 6}}}, [](auto& x) { return cumsum(x[0], 1); });
  add_case("cumsum[5,3,2]ax0", {{{5, 3, 2}}}, [](auto& x) { return cumsum(x[0], 0); });
  add_case("where[3,4]", {{{3, 4}}, {{3, 4}}, {{4}}}, [](auto& x) { return where(gt(x[0], x[1]), x[0], x[2]); });
  add_case("masked_fill[3,5]", {{{3, 5}}}, [](auto& x) {
    return masked_fill(x[0], lt(x[0], Tensor::scalar(0.0, x[0].dtype(), x[0].device())), -3.0);
  });
  add_case("embedding[7,5]", {{{7, 5}}}, [](auto& x) {
    const Tensor ids = Tensor::from_vector<std::int64_t>({3, 0, 6, 3, 3, 1}, {2, 3}).to(x[0].device());
    return embedding(x[0], ids);
  });
  add_case("index_select[4,6,3]ax1", {{{4, 6, 3}}}, [](auto& x) {
    const Tensor idx = Tensor::from_vector<std::int32_t>({5, 0, 5, 2}, {4}).to(x[0].device());
    return index_select(x[0], 1, idx);
  });
  // a composite: a two-layer MLP with a softmax cross-entropy written in small ops
  add_case("mlp+cross_entropy", {{{6, 5}}, {{5, 7}}, {{7}}, {{7, 4}}}, [](auto& x) {
    const Tensor h = gelu(add(matmul(x[0], x[1]), x[2]));
    const Tensor logp = log_softmax(matmul(h, x[3]), -1);
    const Tensor target = Tensor::from_vector<double>({1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1},
                                                      {6, 4}).to(logp.dtype()).to(logp.device());
    return neg(mean(sum(mul(logp, target), {1})));
  });
  return cases;
}

}  // namespace dark::testing
