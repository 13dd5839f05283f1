// Elementwise benchmark: dark::add and dark::gelu on 16M f32 elements are memory-bound, so
// their peer is memcpy of 16M floats. Effective bandwidth = bytes moved / time (add reads two
// and writes one 64 MB tensor, gelu and memcpy read one and write one); ratio = ours / memcpy.
// Dropout's peer is the ops it fused (run_dropout).
//
// The memcpy destination is touched before timing, and it is split over the same OpenMP
// threads our kernels use (one memcpy per contiguous chunk), so the peer is the bandwidth
// this thread count can reach. Our ops allocate each output through the caching allocator,
// so after warm-up every call reuses the previous call's (already faulted) block.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "bench/harness.h"
#include "core/cpu/parallel.h"
#include "core/error.h"
#include "core/tensor.h"

namespace dark::bench {
namespace {

constexpr std::int64_t kElements = std::int64_t{1} << 24;  // 16M floats = 64 MB
constexpr double kTensorBytes = static_cast<double>(kElements) * sizeof(float);
constexpr double kElementwiseTarget = 0.60;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using HostBuffer = std::unique_ptr<float[], FreeDeleter>;

HostBuffer aligned_floats(std::int64_t n) {
  void* p = std::aligned_alloc(64, static_cast<std::size_t>(n) * sizeof(float));
  DARK_CHECK(p != nullptr, "aligned_alloc of ", n, " floats failed");
  return HostBuffer(static_cast<float*>(p));
}

// memcpy of n floats, one contiguous chunk per OpenMP thread (static split). Like every
// parallel region of the repository it runs through RegionErrors (nothing here throws
// today; the wrapper costs nothing measurable next to 64 MB of copying).
void parallel_memcpy(float* dst, const float* src, std::int64_t n) {
  cpu::RegionErrors errors;
#pragma omp parallel
  {
    const std::int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    errors.run(t, [&] {
      const std::int64_t begin = n * t / threads, end = n * (t + 1) / threads;
      std::memcpy(dst + begin, src + begin, static_cast<std::size_t>(end - begin) * sizeof(float));
    });
  }
  errors.rethrow();
}

// The peer shared by both cases: source filled, destination pre-faulted.
struct MemcpyPeer {
  HostBuffer src = aligned_floats(kElements), dst = aligned_floats(kElements);
  MemcpyPeer() {
    for (std::int64_t i = 0; i < kElements; ++i) src[i] = static_cast<float>(i % 1000) * 1e-3f;
    std::memset(dst.get(), 0, static_cast<std::size_t>(kTensorBytes));
  }
  void operator()() {
    parallel_memcpy(dst.get(), src.get(), kElements);
    escape(dst.get());
  }
};

Row make_row(const std::string& name, double bytes_ours) {
  Row row;
  row.name = name;
  row.peer_name = str("memcpy (", omp_get_max_threads(), " threads)");
  row.unit = "GB/s";
  row.work_ours = bytes_ours;
  row.work_peer = 2 * kTensorBytes;
  row.target = kElementwiseTarget;
  return row;
}

Row run_add(const Options& opt) {
  NoGradGuard no_grad;
  Row row = make_row("add 16M f32", 3 * kTensorBytes);
  const Tensor a = Tensor::randn({kElements}, /*seed=*/3);
  const Tensor b = Tensor::randn({kElements}, /*seed=*/4);

  // Validation: fp32 addition is exact per element, so the result must match bitwise.
  {
    const Tensor c = add(a, b);
    DARK_CHECK(c.shape() == a.shape(), "add returned shape ", shape_str(c.shape()));
    const std::vector<float> got = c.to_vector<float>();
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    for (std::int64_t i = 0; i < kElements; ++i) {
      if (got[i] != pa[i] + pb[i]) {
        row.error = str("validation: add[", i, "] = ", got[i], ", expected ", pa[i] + pb[i]);
        return row;
      }
    }
  }

  MemcpyPeer peer;
  measure_pair(row, [&] { const Tensor c = add(a, b); }, peer, opt);
  return row;
}

Row run_gelu(const Options& opt) {
  NoGradGuard no_grad;
  Row row = make_row("gelu 16M f32", 2 * kTensorBytes);
  const Tensor x = Tensor::randn({kElements}, /*seed=*/5);

  // Validation against exact gelu in double: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)).
  {
    const Tensor y = gelu(x);
    DARK_CHECK(y.shape() == x.shape(), "gelu returned shape ", shape_str(y.shape()));
    const std::vector<float> got = y.to_vector<float>();
    const float* px = x.data<float>();
    for (std::int64_t i = 0; i < kElements; i += 7) {
      const double v = px[i];
      const double want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
      if (!(std::fabs(got[i] - want) <= 1e-5 + 1e-5 * std::fabs(want))) {
        row.error = str("validation: gelu(", v, ") = ", got[i], ", expected ", want);
        return row;
      }
    }
  }

  MemcpyPeer peer;
  measure_pair(row, [&] { const Tensor y = gelu(x); }, peer, opt);
  return row;
}

// Dropout forward and backward (through the tape, as training runs it) against the ops it
// fused, written out: rand, ge, mul_scalar and mul, whose backward multiplies by the kept mask.
// Both draw the same Philox numbers once; ours then moves x, out and a 1-bit mask where the
// ops wrote and read the uniform, the comparison and the mask as f32 tensors. Elements per
// second; ratio = their time / ours.
Row run_dropout(const Options& opt) {
  Row row;
  row.name = "dropout fwd+bwd 16M f32";
  row.peer_name = "rand, ge, mul_scalar, mul";
  row.unit = "Gelem/s";
  row.work_ours = row.work_peer = static_cast<double>(kElements);
  row.target = 1.0;
  constexpr double p = 0.1;
  const Tensor x = Tensor::randn({kElements}, /*seed=*/6), dy = Tensor::randn({kElements}, /*seed=*/7);
  const auto written_out = [&](const Tensor& in) {
    Tensor keep;
    {
      NoGradGuard no_grad;
      keep = mul_scalar(ge(Tensor::rand(in.shape(), 9, 1), Tensor::scalar(p)), 1.0 / (1.0 - p));
    }
    return mul(in, keep);
  };
  const auto fwd_bwd = [&](auto&& f) {
    EnableGradGuard grad;  // the harness runs cases without grad mode
    Tensor leaf = x.detach();
    leaf.set_requires_grad(true);
    backward(f(leaf), dy);
    escape(leaf.grad().data<float>());
  };
  {
    NoGradGuard no_grad;
    if (dropout(x, p, 9, {1, Tensor()}).to_vector<float>() != written_out(x).to_vector<float>()) {
      row.error = "validation: the fused dropout's values differ from the ops written out";
      return row;
    }
  }
  const auto fused = [&](const Tensor& in) { return dropout(in, p, 9, {1, Tensor()}); };
  measure_pair(row, [&] { fwd_bwd(fused); }, [&] { fwd_bwd(written_out); }, opt);
  return row;
}

}  // namespace

void add_elementwise_cases(std::vector<Case>& cases) {
  cases.push_back({"add 16M f32", run_add});
  cases.push_back({"gelu 16M f32", run_gelu});
  cases.push_back({"dropout fwd+bwd 16M f32", run_dropout});
}

}  // namespace dark::bench
