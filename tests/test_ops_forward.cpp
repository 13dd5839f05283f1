// Forward values of the ops against independent naive loops written here, in float32
// (the production dtype, vectorised kernels) and float64. PyTorch-generated references
// for composites are in test_torch_reference.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace dark::ops_forward_test {  // its own namespace: unity batches join test files
namespace {

std::vector<double> values(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]) ||
                    (std::isinf(want[i]) && got[i] == want[i]) || (std::isnan(want[i]) && std::isnan(got[i]));
    if (!ok && bad++ < 5) ADD_FAILURE() << what << " element " << i << ": got " << got[i] << " want " << want[i];
  }
}

Tensor randn(const Shape& s, std::uint64_t stream, DType dtype = DType::f32) { return Tensor::randn(s, 11, stream, dtype); }

TEST(Forward, UnaryMatchesLibm) {
  // Wide range, including the tails where approximations usually break.
  std::vector<double> xs;
  for (int i = 0; i <= 4000; ++i) xs.push_back(-20.0 + 40.0 * i / 4000.0);
  const Tensor x32 = Tensor::from_vector(xs, {static_cast<std::int64_t>(xs.size())}).to(DType::f32);
  const std::vector<double> xr = values(x32);  // the float inputs, exactly
  auto ref = [&](auto f) {
    std::vector<double> out;
    for (double v : xr) out.push_back(f(v));
    return out;
  };
  const double tol = 1e-6;  // a few float ulps
  expect_close(values(exp(mul_scalar(x32, 4.0))), ref([](double v) { return std::exp(static_cast<float>(4.0 * v)); }), 2e-6, 0, "exp");
  expect_close(values(tanh(x32)), ref([](double v) { return std::tanh(v); }), tol, 1e-7, "tanh");
  expect_close(values(sigmoid(x32)), ref([](double v) { return 1 / (1 + std::exp(-v)); }), tol, 0, "sigmoid");
  expect_close(values(silu(x32)), ref([](double v) { return v / (1 + std::exp(-v)); }), tol, 1e-30, "silu");
  // gelu's far negative tail (|y| < 1e-12) loses relative accuracy to the float rounding of
  // -x^2/2 inside exp (gelu) or to 1 + tanh cancelling (gelu_tanh, as in every float32
  // implementation); an absolute 1e-12 there is far below anything training can see.
  expect_close(values(gelu(x32)), ref([](double v) { return 0.5 * v * std::erfc(-v / std::sqrt(2.0)); }), 2e-6, 1e-12, "gelu");
  expect_close(values(gelu_tanh(x32)),
               ref([](double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); }),
               2e-6, 1e-12, "gelu_tanh");
  const Tensor pos = add_scalar(abs(x32), 1e-3);
  const std::vector<double> pr = values(pos);
  std::vector<double> logs, sqrts;
  for (double v : pr) logs.push_back(std::log(v)), sqrts.push_back(1 / std::sqrt(v));
  expect_close(values(log(pos)), logs, tol, 1e-7, "log");
  expect_close(values(rsqrt(pos)), sqrts, tol, 0, "rsqrt");
}

TEST(Forward, UnarySpecialValues) {
  const Tensor x = Tensor::from_vector<float>({-INFINITY, INFINITY, NAN, 0.0f, -1.0f}, {5});
  const auto e = values(exp(x));
  EXPECT_EQ(e[0], 0.0);
  EXPECT_TRUE(std::isinf(e[1]));
  EXPECT_TRUE(std::isnan(e[2]));
  EXPECT_EQ(e[3], 1.0);
  const auto l = values(log(x));
  EXPECT_TRUE(std::isnan(l[0]));
  EXPECT_TRUE(std::isinf(l[1]));
  EXPECT_TRUE(std::isnan(l[2]));
  EXPECT_TRUE(std::isinf(l[3]) && l[3] < 0);
  EXPECT_TRUE(std::isnan(l[4]));
}

TEST(Forward, BinaryBroadcastAgainstLoops) {
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor a = randn({4, 1, 5}, 1, dt);
    const Tensor b_base = randn({5, 3}, 2, dt);
    const Tensor b = core::transpose(b_base, 0, 1);  // [3, 5], non-contiguous
    const auto av = values(a), bv = values(b.contiguous());
    for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div, BinaryOp::maximum, BinaryOp::gt}) {
      const Tensor out = binary(op, a, b);
      ASSERT_EQ(out.shape(), (Shape{4, 3, 5}));
      std::vector<double> want;
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 3; ++j)
          for (int k = 0; k < 5; ++k) {
            const double x = av[i * 5 + k], y = bv[j * 5 + k];
            switch (op) {
              case BinaryOp::add: want.push_back(x + y); break;
              case BinaryOp::sub: want.push_back(x - y); break;
              case BinaryOp::mul: want.push_back(x * y); break;
              case BinaryOp::div: want.push_back(x / y); break;
              case BinaryOp::maximum: want.push_back(std::max(x, y)); break;
              default: want.push_back(x > y ? 1.0 : 0.0);
            }
          }
      expect_close(values(out), want, dt == DType::f32 ? 1e-6 : 1e-15, 0, binary_op_name(op));
    }
  }
}

TEST(Forward, MatmulAgainstLoops) {
  // odd sizes, all four transpose combinations, broadcast batch, float32 through oneDNN
  const std::int64_t B = 3, M = 17, K = 33, N = 9;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Tensor a = randn(ta ? Shape{B, K, M} : Shape{B, M, K}, 3);
      const Tensor b = randn(tb ? Shape{N, K} : Shape{K, N}, 4);
      const auto av = values(a), bv = values(b);
      std::vector<double> want;
      for (int z = 0; z < B; ++z)
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j) {
            double acc = 0;
            for (int p = 0; p < K; ++p)
              acc += av[z * M * K + (ta ? p * M + i : i * K + p)] * bv[tb ? j * K + p : p * N + j];
            want.push_back(acc);
          }
      expect_close(values(matmul(a, b, ta, tb)), want, 1e-5, 1e-5, "matmul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
    }
}

TEST(Forward, PerHeadMatmulAgainstLoops) {
  // (rows, heads, k) x (w_heads, n, k): every head against its group's matrix, odd sizes,
  // float32 through oneDNN and float64 through the plain loop
  const std::int64_t R = 13, K = 9, N = 7;
  for (DType dt : {DType::f32, DType::f64})
    for (std::int64_t w_heads : {1, 2, 6}) {
      const std::int64_t H = 6, g = H / w_heads;
      const Tensor x = randn({R, H, K}, 8, dt), w = randn({w_heads, N, K}, 9, dt);
      const auto xv = values(x), wv = values(w);
      std::vector<double> want;
      for (std::int64_t i = 0; i < R; ++i)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t j = 0; j < N; ++j) {
            double acc = 0;
            for (std::int64_t p = 0; p < K; ++p) acc += xv[(i * H + h) * K + p] * wv[((h / g) * N + j) * K + p];
            want.push_back(acc);
          }
      const Tensor out = per_head_matmul(x, w);
      EXPECT_EQ(out.shape(), Shape({R, H, N}));
      expect_close(values(out), want, dt == DType::f32 ? 1e-5 : 1e-13, 1e-5, "per_head_matmul w_heads=" + std::to_string(w_heads));
    }
}

TEST(Forward, ReductionsAgainstLoops) {
  const Tensor x = randn({3, 4, 5}, 5, DType::f64);
  const auto v = values(x);
  // over axes {0, 2}: result [4]
  std::vector<double> s(4, 0), m(4, -INFINITY), l(4, 0);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 5; ++k) s[j] += v[i * 20 + j * 5 + k], m[j] = std::max(m[j], v[i * 20 + j * 5 + k]);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 5; ++k) l[j] += std::exp(v[i * 20 + j * 5 + k] - m[j]);
  std::vector<double> mean_ref, lse_ref;
  for (int j = 0; j < 4; ++j) mean_ref.push_back(s[j] / 15), lse_ref.push_back(m[j] + std::log(l[j]));
  expect_close(values(sum(x, {0, 2})), s, 1e-14, 1e-14, "sum");
  expect_close(values(mean(x, {2, 0})), mean_ref, 1e-14, 1e-14, "mean");
  expect_close(values(max(x, {0, -1})), m, 0, 0, "max");
  expect_close(values(logsumexp(x, {0, 2})), lse_ref, 1e-14, 1e-14, "logsumexp");
  EXPECT_EQ(sum(x, {0, 2}, true).shape(), (Shape{1, 4, 1}));
  EXPECT_NEAR(sum(x).item(), std::accumulate(v.begin(), v.end(), 0.0), 1e-12);
}

TEST(Forward, SoftmaxAgainstLoopsIncludingMaskedRows) {
  const Tensor x = mul_scalar(randn({4, 37}, 6), 30.0);  // large logits: tests the max shift
  const auto v = values(x);
  std::vector<double> sm, lsm;
  for (int r = 0; r < 4; ++r) {
    double mx = -INFINITY, z = 0;
    for (int j = 0; j < 37; ++j) mx = std::max(mx, v[r * 37 + j]);
    for (int j = 0; j < 37; ++j) z += std::exp(v[r * 37 + j] - mx);
    for (int j = 0; j < 37; ++j) sm.push_back(std::exp(v[r * 37 + j] - mx) / z), lsm.push_back(v[r * 37 + j] - mx - std::log(z));
  }
  expect_close(values(softmax(x)), sm, 1e-5, 1e-7, "softmax");
  expect_close(values(log_softmax(x)), lsm, 1e-5, 1e-5, "log_softmax");
  // A row with one finite logit and the rest masked to -inf puts all mass on that logit.
  const Tensor masked = Tensor::from_vector<float>({-INFINITY, 2.0f, -INFINITY}, {1, 3});
  EXPECT_EQ(values(softmax(masked)), (std::vector<double>{0, 1, 0}));
}

TEST(Forward, IndexingCumsumWhereConcat) {
  const Tensor w = Tensor::arange(12, DType::f32);
  const Tensor w2 = core::reshape(w, {4, 3});
  const Tensor ids = Tensor::from_vector<std::int64_t>({2, 0, 2}, {3});
  EXPECT_EQ(values(embedding(w2, ids)), (std::vector<double>{6, 7, 8, 0, 1, 2, 6, 7, 8}));
  EXPECT_EQ(values(index_select(w2, 1, Tensor::from_vector<std::int32_t>({2, 2}, {2}))),
            (std::vector<double>{2, 2, 5, 5, 8, 8, 11, 11}));
  EXPECT_EQ(values(cumsum(w2, 0)), (std::vector<double>{0, 1, 2, 3, 5, 7, 9, 12, 15, 18, 22, 26}));
  EXPECT_EQ(values(cumsum(w2, 1)), (std::vector<double>{0, 1, 3, 3, 7, 12, 6, 13, 21, 9, 19, 30}));
  const Tensor cond = gt(w2, Tensor::scalar(5.0));
  EXPECT_EQ(values(where(cond, w2, Tensor::scalar(-1.0))), (std::vector<double>{-1, -1, -1, -1, -1, -1, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(values(masked_fill(w2, cond, 0.5)), (std::vector<double>{0, 1, 2, 3, 4, 5, .5, .5, .5, .5, .5, .5}));
  const Tensor c = concat({core::slice(w2, 1, 0, 1), core::slice(w2, 1, 2, 3)}, 1);
  EXPECT_EQ(values(c), (std::vector<double>{0, 2, 3, 5, 6, 8, 9, 11}));
  const auto parts = split(w2, {1, 3}, 0);
  EXPECT_EQ(values(parts[1]), (std::vector<double>{3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_THROW(embedding(w2, Tensor::from_vector<std::int64_t>({4}, {1})), Error);  // out of range id
}

// The message CUDA repeats (tests/test_gpu_ops.cpp): kernel, first bad index and position, range.
TEST(Forward, OutOfRangeIndexNamesKernelPositionAndRange) {
  auto message = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "no dark::Error";
  };
  const Tensor x = core::reshape(Tensor::arange(12), {4, 3});
  EXPECT_EQ(message([&] { index_select(x, 0, Tensor::from_vector<std::int32_t>({1, 4, -1}, {3})); }),
            "gather: index 4 at position 1 is out of range [0, 4)");
  Tensor dx = Tensor::zeros({4, 3});
  EXPECT_EQ(message([&] {
              kernels::scatter_add().get(DeviceType::cpu, DType::f32)(Tensor::ones({2, 3}),
                                                                      Tensor::from_vector<std::int64_t>({3, -1}, {2}),
                                                                      dx, 1, 4, 3);
            }),
            "scatter_add: index -1 at position 1 is out of range [0, 4)");
  EXPECT_EQ(values(dx), std::vector<double>(12, 0.0)) << "scatter_add wrote before failing";
}

TEST(Forward, ElementwiseLargeParallelMatchesSerialDefinition) {
  // Big enough to take the threaded, vectorised paths.
  const Tensor a = randn({1 << 18}, 7), b = randn({1 << 18}, 8);
  const auto av = values(a), bv = values(b);
  const auto sv = values(add(a, b));
  for (std::size_t i = 0; i < av.size(); i += 997) ASSERT_EQ(sv[i], static_cast<double>(static_cast<float>(av[i]) + static_cast<float>(bv[i])));
}

TEST(Forward, ArgmaxIsTheFirstLargestOfTheLastAxisAsStdMaxElementFindsIt) {
  const double nan = std::nan("");
  // Ties (the first wins), a NaN first (never beaten by a comparison), a NaN later (skipped),
  // negative rows and a one-element axis.
  const std::vector<double> rows = {1, 3, 3, 2,  nan, 5, 9, 1,  4, nan, 7, 7,  -3, -1, -2, -1};
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    const Tensor x = Tensor::from_vector(rows, {2, 2, 4}).to(dt);
    const Tensor i = argmax(x);
    ASSERT_EQ(i.shape(), (Shape{2, 2})) << dtype_name(dt);
    ASSERT_EQ(i.dtype(), DType::i64);
    std::vector<std::int64_t> want;
    for (std::size_t r = 0; r < 4; ++r)
      want.push_back(std::max_element(rows.begin() + 4 * r, rows.begin() + 4 * r + 4) - (rows.begin() + 4 * r));
    EXPECT_EQ(i.to_vector<std::int64_t>(), want) << dtype_name(dt);
    EXPECT_EQ(want, (std::vector<std::int64_t>{1, 0, 2, 1}));
  }
  EXPECT_EQ(argmax(Tensor::from_vector<float>({4, 2}, {2, 1})).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 0}));
  // Many rows take the threaded path; every row against the serial definition.
  const Tensor big = randn({3000, 37}, 9);
  const std::vector<double> v = values(big);
  const std::vector<std::int64_t> got = argmax(big).to_vector<std::int64_t>();
  for (std::size_t r = 0; r < 3000; ++r)
    ASSERT_EQ(got[r], std::max_element(v.begin() + 37 * r, v.begin() + 37 * r + 37) - (v.begin() + 37 * r)) << r;
  EXPECT_THROW(argmax(Tensor::from_vector<std::int32_t>({1, 2}, {2})), Error);  // not floating
}

}  // namespace
}  // namespace dark::ops_forward_test
