// Matmul benchmark: dark::matmul on f32 CPU tensors against raw oneDNN dnnl_sgemm (row-major
// C API) on the same data. Square shapes, a transformer MLP shape and both of its transposed
// forms (what backward runs), and a batched case against a loop of dnnl_sgemm calls.
// Before timing, ours is checked against the sgemm result; no tape is recorded.
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "bench/harness.h"
#include "core/error.h"
#include "core/tensor.h"

namespace dark::bench {
namespace {

constexpr double kMatmulTarget = 0.90;

// C (batch, m, n) = op(A) op(B) per batch entry, where A is stored (m, k) or, transposed,
// (k, m), and B is stored (k, n) or (n, k).
struct MatmulShape {
  std::string name;
  std::int64_t batch, m, n, k;
  bool trans_a, trans_b;
};

Shape stored_a(const MatmulShape& s) {
  Shape inner = s.trans_a ? Shape{s.k, s.m} : Shape{s.m, s.k};
  if (s.batch > 1) inner.insert(inner.begin(), s.batch);
  return inner;
}
Shape stored_b(const MatmulShape& s) {
  Shape inner = s.trans_b ? Shape{s.n, s.k} : Shape{s.k, s.n};
  if (s.batch > 1) inner.insert(inner.begin(), s.batch);
  return inner;
}

// The peer: one dnnl_sgemm per batch entry, row-major.
void sgemm_batch(const MatmulShape& s, const float* a, const float* b, float* c) {
  const dnnl_dim_t lda = s.trans_a ? s.m : s.k;
  const dnnl_dim_t ldb = s.trans_b ? s.k : s.n;
  for (std::int64_t i = 0; i < s.batch; ++i) {
    const dnnl_status_t status =
        dnnl_sgemm(s.trans_a ? 'T' : 'N', s.trans_b ? 'T' : 'N', s.m, s.n, s.k, 1.0f,
                   a + i * s.m * s.k, lda, b + i * s.k * s.n, ldb, 0.0f, c + i * s.m * s.n, s.n);
    DARK_CHECK(status == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(status),
               " on ", s.name);
  }
}

Row run_matmul(const MatmulShape& s, const Options& opt) {
  NoGradGuard no_grad;
  Row row;
  row.name = s.name;
  row.peer_name = s.batch > 1 ? "dnnl_sgemm loop" : "dnnl_sgemm";
  row.unit = "GFLOP/s";
  row.work_ours = row.work_peer = 2.0 * static_cast<double>(s.batch * s.m * s.n * s.k);
  row.target = kMatmulTarget;

  const Tensor a = Tensor::randn(stored_a(s), /*seed=*/1);
  const Tensor b = Tensor::randn(stored_b(s), /*seed=*/2);
  Tensor c_peer = Tensor::empty(s.batch > 1 ? Shape{s.batch, s.m, s.n} : Shape{s.m, s.n});
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* pc = c_peer.data<float>();

  // Validation: ours against the sgemm result, relative to the output's magnitude.
  sgemm_batch(s, pa, pb, pc);
  const Tensor c_ours = matmul(a, b, s.trans_a, s.trans_b);
  DARK_CHECK(c_ours.shape() == c_peer.shape(), "matmul returned shape ", shape_str(c_ours.shape()),
             ", expected ", shape_str(c_peer.shape()));
  const std::vector<float> ours = c_ours.to_vector<float>();
  double max_err = 0, max_ref = 0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    max_err = std::max(max_err, static_cast<double>(std::fabs(ours[i] - pc[i])));
    max_ref = std::max(max_ref, static_cast<double>(std::fabs(pc[i])));
  }
  const double rel_err = max_err / std::max(max_ref, 1e-30);
  if (!(rel_err <= 1e-4)) {
    row.error = str("validation: max |ours - sgemm| / max |sgemm| = ", rel_err, " > 1e-4");
    return row;
  }

  measure_pair(
      row, [&] { const Tensor c = matmul(a, b, s.trans_a, s.trans_b); },
      [&] {
        sgemm_batch(s, pa, pb, pc);
        escape(pc);
      },
      opt);
  return row;
}

}  // namespace

void add_matmul_cases(std::vector<Case>& cases) {
  const std::vector<MatmulShape> shapes = {
      {"matmul 256x256x256", 1, 256, 256, 256, false, false},
      {"matmul 512x512x512", 1, 512, 512, 512, false, false},
      {"matmul 1024x1024x1024", 1, 1024, 1024, 1024, false, false},
      {"matmul 2048x2048x2048", 1, 2048, 2048, 2048, false, false},
      {"matmul [2048,256]x[256,1024]", 1, 2048, 1024, 256, false, false},
      {"matmul [2048,1024]x[256,1024]^T", 1, 2048, 256, 1024, false, true},
      {"matmul [2048,256]^T x [2048,1024]", 1, 256, 1024, 2048, true, false},
      {"matmul batched [16,256,64]x[16,64,256]", 16, 256, 256, 64, false, false},
  };
  for (const MatmulShape& s : shapes)
    cases.push_back({s.name, [s](const Options& opt) { return run_matmul(s, opt); }});
}

}  // namespace dark::bench
