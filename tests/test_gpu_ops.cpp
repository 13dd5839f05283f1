// The op registry (tests/op_cases.h) on CUDA in float32 and bfloat16, forward and
// gradients, against the CPU in float64; plus CUDA checks against the CPU (Philox bits,
// large matmul, index errors, saturating casts) and device graphs (launches against eager
// runs of the same work, the graph's own memory, what a capture refuses). Skips (visibly) when no GPU can run
// kernels: "insufficient driver" and "no device" both count as no GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "autograd/grad_binding.h"
#include "autograd/tape.h"
#include "core/backend.h"
#include "core/device_graph.h"
#include "core/kernel_profile.h"
#include "core/kernels.h"
#include "nn/parameter_buffer.h"
#include "tests/gpu_compare.h"
#include "tests/op_cases.h"
#include "test_util.h"

#if defined(DARK_TEST_ON_CUDA_EMULATOR)
#include "cuda_emulator/control.h"
#endif

namespace dark::testing {
namespace {

using dark::testing::error_of;


class GpuOps : public ::testing::TestWithParam<std::tuple<OpCase, DType>> {};

TEST_P(GpuOps, MatchesCpuFloat64) {
  DARK_REQUIRE_GPU();
  const auto& [c, dtype] = GetParam();
  // bf16 keeps 8 significant bits: errors of a few 2^-8 relative per rounding step.
  expect_case_matches_cpu(c, dtype, dtype == DType::f32 ? Tolerance{1e-4, 1e-5} : Tolerance{5e-2, 5e-2});
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<OpCase, DType>>& info) {
  return dark::testing::case_name(std::get<0>(info.param), std::get<1>(info.param), info.index);
}

INSTANTIATE_TEST_SUITE_P(AllOps, GpuOps,
                         ::testing::Combine(::testing::ValuesIn(op_cases()), ::testing::Values(DType::f32, DType::bf16)),
                         case_name);

// Random features, initial weights and dropout masks must not depend on the device: the
// normal transform uses core/portable_math.h on both sides (no library log / cos, no FMA), so
// even float64 normals are the same bits. (With each device's own log and cos an H200 gave
// 1 ulp differences in float64; the emulator, which runs the host's libm, could not see them.)
TEST(Gpu, PhiloxGivesTheSameBitsAsTheCpu) {
  DARK_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    const Tensor cpu = Tensor::randn({4099}, 17, 5, dt);
    const Tensor gpu = Tensor::randn({4099}, 17, 5, dt, Device::cuda(0)).to(Device::cpu());
    EXPECT_EQ(compare(gpu, cpu, {0, 0}), "") << dtype_name(dt) << " normal";
    const Tensor ucpu = Tensor::rand({4099}, 17, 5, dt);
    const Tensor ugpu = Tensor::rand({4099}, 17, 5, dt, Device::cuda(0)).to(Device::cpu());
    EXPECT_EQ(compare(ugpu, ucpu, {0, 0}), "") << dtype_name(dt) << " uniform";
  }
}

// The fused dropout on the GPU has the bits of its ops written out on the GPU (bf16
// included: the uniform, p and the scale each rounded as those ops round them), forward and
// backward, with its stream's offset read from device memory (a graph launch's key); in f32
// and f64 those are the CPU's bits too.
TEST(Gpu, DropoutHasTheBitsOfItsOpsWrittenOut) {
  DARK_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    const Tensor x = Tensor::randn({5, 411}, 3, 0, dt, gpu), dy = Tensor::randn({5, 411}, 4, 0, dt, gpu);
    const double p = 0.15;
    const Tensor keep =
        mul_scalar(ge(Tensor::rand(x.shape(), 8, 70000, dt, gpu), Tensor::scalar(p, dt, gpu)), 1.0 / (1.0 - p));
    const RandomStream stream{4464, Tensor::from_vector<std::int64_t>({65536}, {1}).to(gpu)};  // 70000 in all
    Tensor leaf = x.clone();
    leaf.set_requires_grad(true);
    const Tensor y = dropout(leaf, p, 8, stream);
    backward(sum(mul(y, dy)));
    EXPECT_EQ(compare(y.to(Device::cpu()), mul(x, keep).to(Device::cpu()), {0, 0}), "") << dtype_name(dt);
    EXPECT_EQ(compare(leaf.grad().to(Device::cpu()), mul(dy, keep).to(Device::cpu()), {0, 0}), "") << dtype_name(dt);
    if (dt == DType::bf16) continue;
    EXPECT_EQ(compare(y.to(Device::cpu()), dropout(x.to(Device::cpu()), p, 8, {70000, Tensor()}), {0, 0}), "")
        << dtype_name(dt) << ": the CPU's dropout";
  }
}

TEST(Gpu, LargeMatmulMatchesCpu) {
  DARK_REQUIRE_GPU();
  const Tensor a = Tensor::randn({257, 513}, 1), b = Tensor::randn({513, 129}, 2);
  const Tensor want = matmul(a.to(DType::f64), b.to(DType::f64));
  EXPECT_EQ(compare(matmul(a.to(Device::cuda(0)), b.to(Device::cuda(0))), want, {1e-4, 1e-4}), "");
  EXPECT_EQ(compare(matmul(a.to(DType::bf16).to(Device::cuda(0)), b.to(DType::bf16).to(Device::cuda(0)), false, false).to(DType::f32),
                    want, {5e-2, 0.5}), "");
}

TEST(Gpu, DeviceMismatchIsAClearError) {
  DARK_REQUIRE_GPU();
  try {
    add(Tensor::zeros({2, 3}), Tensor::zeros({2, 3}, DType::f32, Device::cuda(0)));
    FAIL() << "no exception";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("device mismatch"), std::string::npos) << m;
    EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
  }
}

TEST(Gpu, AllocatorReusesDeviceMemory) {
  DARK_REQUIRE_GPU();
  { Tensor warm = Tensor::empty({1000, 1000}, DType::f32, Device::cuda(0)); }
  const auto before = allocator_for(Device::cuda(0)).stats();
  for (int i = 0; i < 50; ++i) Tensor t = Tensor::empty({1000, 1000}, DType::f32, Device::cuda(0));
  EXPECT_EQ(allocator_for(Device::cuda(0)).stats().system_allocs, before.system_allocs);
}


// gather used to give NaN for an index outside [0, n) on CUDA; now it throws the CPU's
// message, naming the first bad position, for i32 and i64 indices.
TEST(Gpu, GatherOutOfRangeIndexIsTheCpuError) {
  DARK_REQUIRE_GPU();
  const Tensor x = Tensor::randn({4, 3}, 1);
  for (DType index_dtype : {DType::i32, DType::i64}) {
    const Tensor index = Tensor::from_vector<std::int64_t>({1, 2, 4, 0, -1}, {5}).to(index_dtype);
    const std::string want = error_of([&] { index_select(x, 0, index); });
    EXPECT_EQ(want, "gather: index 4 at position 2 is out of range [0, 4)");
    EXPECT_EQ(error_of([&] { index_select(x.to(Device::cuda(0)), 0, index.to(Device::cuda(0))); }), want)
        << dtype_name(index_dtype);
  }
  // The lowest bad position is reported, however the threads race.
  const Tensor many_bad = Tensor::from_vector<std::int64_t>(std::vector<std::int64_t>(5000, 9), {5000});
  EXPECT_EQ(error_of([&] { index_select(x.to(Device::cuda(0)), 0, many_bad.to(Device::cuda(0))); }),
            "gather: index 9 at position 0 is out of range [0, 4)");
  // A valid call still works after a failed one.
  const Tensor ok = Tensor::from_vector<std::int64_t>({3, 0}, {2});
  EXPECT_EQ(compare(index_select(x.to(Device::cuda(0)), 0, ok.to(Device::cuda(0))), index_select(x, 0, ok), {0, 0}), "");
}

// scatter_add (the backward of gather) used to skip an out-of-range index on CUDA; now it
// throws before writing, leaving dx as it was.
TEST(Gpu, ScatterAddOutOfRangeIndexIsTheCpuErrorAndWritesNothing) {
  DARK_REQUIRE_GPU();
  const Tensor dout = Tensor::ones({2, 3, 5});  // (outer, k, inner)
  const Tensor index = Tensor::from_vector<std::int32_t>({0, -2, 7}, {3});
  for (Device device : {Device::cpu(), Device::cuda(0)}) {
    Tensor dx = Tensor::full({2, 4, 5}, 0.5, DType::f32, device);  // (outer, n, inner)
    EXPECT_EQ(error_of([&] {
                kernels::scatter_add().get(device.type, DType::f32)(dout.to(device), index.to(device), dx, 2, 4, 5);
              }),
              "scatter_add: index -2 at position 1 is out of range [0, 4)")
        << device.to_string();
    EXPECT_EQ(dx.to(Device::cpu()).to_vector<float>(), std::vector<float>(40, 0.5f)) << device.to_string();
  }
}

// Float -> integer casts saturate on CUDA exactly as on the CPU (Rust's `as`).
TEST(Gpu, FloatToIntegerCastsSaturateLikeTheCpu) {
  DARK_REQUIRE_GPU();
  constexpr double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  constexpr auto i32_min = std::numeric_limits<std::int32_t>::min(), i32_max = std::numeric_limits<std::int32_t>::max();
  constexpr auto i64_min = std::numeric_limits<std::int64_t>::min(), i64_max = std::numeric_limits<std::int64_t>::max();
  const Tensor in32 = Tensor::from_vector<double>({nan, inf, -inf, 3e10, -3e10, 2.7, -2.7}, {7});
  const Tensor in64 = Tensor::from_vector<double>({nan, inf, -inf, 3e19, -3e19, 17179869184.0, 2.7, -2.7}, {8});
  for (DType from : {DType::f32, DType::f64, DType::bf16}) {
    const Tensor x32 = in32.to(from).to(Device::cuda(0)), x64 = in64.to(from).to(Device::cuda(0));
    EXPECT_EQ(x32.to(DType::i32).to_vector<std::int32_t>(),
              (std::vector<std::int32_t>{0, i32_max, i32_min, i32_max, i32_min, 2, -2}))
        << dtype_name(from);
    EXPECT_EQ(x64.to(DType::i64).to_vector<std::int64_t>(),
              (std::vector<std::int64_t>{0, i64_max, i64_min, i64_max, i64_min, std::int64_t{1} << 34, 2, -2}))
        << dtype_name(from);
  }
  EXPECT_EQ(Tensor::full({3}, nan, DType::i32, Device::cuda(0)).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{0, 0, 0}));
}

// A kernel profile on the GPU brackets each kernel with CUDA events (read at the end).
TEST(Gpu, KernelProfileTimesCudaKernelsWithEvents) {
  DARK_REQUIRE_GPU();
  const Tensor a = Tensor::randn({128, 128}, 1).to(Device::cuda(0)), b = Tensor::randn({128, 128}, 2).to(Device::cuda(0));
  KernelProfile profile;
  {
    const ProfilePass pass("forward");
    (void)matmul(a, b);
    (void)add(a, b);
    (void)add(a, b);
  }
  const std::vector<KernelProfile::Row> rows = profile.finish();
  int matched = 0;
  for (const auto& r : rows) {
    EXPECT_EQ(r.device, DeviceType::cuda) << r.kernel;
    EXPECT_EQ(r.pass, "forward");
    EXPECT_GE(r.ms, 0) << r.kernel;
    if (r.kernel == "matmul") {
      EXPECT_EQ(r.calls, 1);
      ++matched;
    }
    if (r.kernel == "binary") {
      EXPECT_EQ(r.calls, 2);
      ++matched;
    }
  }
  EXPECT_EQ(matched, 2);
}

// bf16 gradients cross the graph in bf16 (autograd/tape.cpp, accumulate): a chain of ops
// casts nothing but the leaf's gradient to f32, and a tensor read twice sums its two bf16
// gradients in f32 straight into bf16 with grad_sum. Before, every edge cast up and back
// down, and a sum cast both terms up first and the result back down.
TEST(Gpu, Bf16GradientsCastOnlyAtLeavesAndSums) {
  DARK_REQUIRE_GPU();
  auto casts_in_backward = [](bool branch) {
    Tensor x = Tensor::randn({64, 32}, 3).to(Device::cuda(0)).to(DType::bf16).set_requires_grad(true);
    const Tensor h = exp(mul_scalar(reshape(x, {32, 64}), 0.5));
    const Tensor y = branch ? add(h, sigmoid(h)) : tanh(h);
    const Tensor loss = sum(mul_scalar(reshape(y, {2048}), 0.25));
    KernelProfile profile;
    backward(loss);
    std::int64_t casts = 0;
    for (const auto& r : profile.finish()) casts += r.kernel == "cast" ? r.calls : 0;
    EXPECT_EQ(x.grad().dtype(), DType::f32);
    return casts;
  };
  EXPECT_EQ(casts_in_backward(false), 1);
  EXPECT_EQ(casts_in_backward(true), 1);
}

// Mixed precision's weights (autograd/weights.h): an f32 master weight multiplied with bf16
// activations gets the product's f32 accumulation as its gradient, not rounded to bf16, and the
// product writes it into the zeroed buffer itself (no cast, no sum in the backward). Against
// the float64 product of the same bf16 operands on the CPU.
TEST(Gpu, Bf16ProductsGiveTheirF32WeightsUnroundedGradientsInPlace) {
  DARK_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const std::int64_t rows = 96, in = 48, out = 40;
  const Tensor x = Tensor::randn({rows, in}, 1).to(gpu).to(DType::bf16);
  const Tensor dout = Tensor::randn({rows, out}, 2).to(gpu).to(DType::bf16);
  Tensor w = Tensor::randn({out, in}, 3).to(gpu).set_requires_grad(true);
  Tensor buffer = Tensor::zeros({out, in}, DType::f32, gpu);
  bind_grad(w, buffer);
  note_grad_zeroed(w);
  const Tensor loss = sum(mul(linear(x, w), dout));  // the product's gradient is dout itself
  KernelProfile profile;
  backward(loss);
  std::map<std::string, std::int64_t> calls;
  for (const auto& r : profile.finish()) calls[r.kernel] += r.calls;
  EXPECT_EQ(calls["matmul"], 1);  // dW only: x needs no gradient
  EXPECT_EQ(calls["cast"], 0);
  EXPECT_EQ(calls["grad_sum"], 0);
  ASSERT_TRUE(w.grad().shares_storage(buffer));
  const std::vector<double> got = values(buffer);
  const Tensor x64 = x.to(Device::cpu()).to(DType::f64), d64 = dout.to(Device::cpu()).to(DType::f64);
  const std::vector<double> want = values(matmul(d64, x64, true, false));
  const std::vector<double> scale = values(matmul(abs(d64), abs(x64), true, false));
  std::int64_t off_bf16 = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-5 * scale[i]) << i;  // f32 accumulation of 96 exact products
    const double rounded = Tensor::scalar(got[i], DType::f32).to(DType::bf16).to(DType::f64).item();
    off_bf16 += rounded != got[i];
  }
  EXPECT_GT(off_bf16, static_cast<std::int64_t>(got.size() * 9 / 10));  // not a bf16 value widened
}

// A training step's weights cast once (ParameterBuffer::cast_values): linear uses its slice of
// the one cast, the same bits as casting the weight itself, and launches no cast of its own.
TEST(Gpu, LinearUsesTheStepsOneCastOfTheWeights) {
  DARK_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const Tensor x = Tensor::randn({32, 24}, 1).to(gpu).to(DType::bf16);
  Tensor w = Tensor::randn({16, 24}, 2).to(gpu);
  nn::ParameterBuffer buffer({{"w", &w}});
  const std::vector<double> own_cast = values(linear(x, w));
  const auto copies = buffer.cast_values(DType::bf16);
  KernelProfile profile;
  const std::vector<double> shared_cast = values(linear(x, w));
  std::int64_t casts = 0;
  for (const auto& r : profile.finish()) casts += r.kernel == "cast" && r.device == DeviceType::cuda ? r.calls : 0;
  EXPECT_EQ(casts, 1);  // values() casting the output to f64; none for the weight
  EXPECT_EQ(shared_cast, own_cast);
}

// A bf16 tensor read by three ops (as q, k and v read the normed input) gets its gradient in
// one three-term grad_sum, straight to bf16, with the bits of summing the terms in f32 in
// arrival order.
TEST(Gpu, ThreeGradientContributionsAreSummedInOnePass) {
  DARK_REQUIRE_GPU();
  Tensor x = Tensor::randn({64, 32}, 3).to(Device::cuda(0)).to(DType::bf16).set_requires_grad(true);
  const Tensor h = mul_scalar(x, 0.5);
  const Tensor loss = sum(add(add(mul_scalar(tanh(h), 0.25), sigmoid(h)), exp(h)));
  KernelProfile profile;
  backward(loss);
  std::int64_t sums = 0;
  for (const auto& r : profile.finish()) sums += r.kernel == "grad_sum" ? r.calls : 0;
  EXPECT_EQ(sums, 1);
  // The same terms, each from a backward of its own branch (a bf16 leaf's gradient is the exact
  // f32 cast of its term), summed in f32 in the replay's order (exp's, sigmoid's, tanh's), rounded
  // to bf16 and scaled by mul_scalar's backward (by 0.5: exact).
  const auto term = [&h](const std::function<Tensor(const Tensor&)>& branch) {
    Tensor leaf = h.detach().set_requires_grad(true);
    backward(sum(branch(leaf)));
    return leaf.grad();
  };
  const Tensor de = term([](const Tensor& t) { return exp(t); });
  const Tensor ds = term([](const Tensor& t) { return sigmoid(t); });
  const Tensor dt = term([](const Tensor& t) { return mul_scalar(tanh(t), 0.25); });
  const Tensor want = mul_scalar(add(add(de, ds), dt).to(DType::bf16).to(DType::f32), 0.5);
  EXPECT_EQ(x.grad().to_vector<float>(), want.to_vector<float>());
}

// grad_sum's sums of bf16 / f32 terms are the bits of casting the terms, adding in f32 and
// casting the sum to the output's dtype, on both devices, for every mix of dtypes (odd length:
// no even-sized fast path assumed).
TEST(Gpu, GradSumOfMixedDtypesEqualsCastThenAdd) {
  DARK_REQUIRE_GPU();
  const Tensor x = Tensor::randn({1001}, 5, 0), y = mul_scalar(Tensor::randn({1001}, 5, 1), 1e-3);
  const Tensor z = mul_scalar(Tensor::randn({1001}, 5, 2), 3e-4);
  for (const DType da : {DType::bf16, DType::f32})
    for (const DType db : {DType::bf16, DType::f32})
      for (const int dc : {-1, static_cast<int>(DType::bf16), static_cast<int>(DType::f32)})  // -1: two terms
        for (const DType dout : {DType::f32, DType::bf16}) {
          const Tensor a = x.to(da), b = y.to(db), c = dc < 0 ? Tensor() : z.to(static_cast<DType>(dc));
          Tensor sum = add(a.to(DType::f32), b.to(DType::f32));
          if (c.defined()) sum = add(sum, c.to(DType::f32));
          const Tensor want = sum.to(dout).to(DType::f32);
          for (const Device device : {Device::cpu(), Device::cuda(0)}) {
            Tensor out = Tensor::empty({1001}, dout, device);
            kernels::grad_sum().get(device.type, dout)(a.to(device), b.to(device),
                                                        c.defined() ? c.to(device) : Tensor(), out);
            EXPECT_EQ(out.to(DType::f32).to_vector<float>(), want.to_vector<float>())
                << dtype_name(da) << " + " << dtype_name(db) << " + " << (c.defined() ? dtype_name(c.dtype()) : "none")
                << " -> " << dtype_name(dout) << " on " << device.to_string();
          }
        }
}

// ---- device graphs (core/device_graph.h) ----

// What the graph tests capture: a product (cuBLAS), elementwise ops, a reduction and a
// device-to-device copy, with intermediates the capture allocates and frees.
Tensor graph_work(const Tensor& x, const Tensor& w, Tensor& copy_out) {
  const Tensor h = relu(matmul(x, w));
  copy_out.copy_(h);
  return sum(mul_scalar(h, 0.5), {1});
}

TEST(DeviceGraph, LaunchesRepeatTheCapturedWorkOnTheInputsNewValues) {
  DARK_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const Tensor w = Tensor::randn({16, 24}, 3, 1).to(gpu);
  Tensor x = Tensor::randn({8, 16}, 3, 0).to(gpu), copied = Tensor::empty({8, 24}, DType::f32, gpu);
  Tensor out;
  const DeviceGraph graph(gpu, [&] { out = graph_work(x, w, copied); });
  for (std::uint64_t draw = 10; draw < 13; ++draw) {
    const Tensor values = Tensor::randn({8, 16}, 3, draw);
    x.copy_(values.to(gpu));  // new inputs: written into the tensor the capture read
    graph.launch();
    Tensor want_copy = Tensor::empty({8, 24}, DType::f32, gpu);
    const Tensor want = graph_work(values.to(gpu), w, want_copy);  // the same work, eagerly
    EXPECT_EQ(out.to_vector<float>(), want.to_vector<float>()) << "draw " << draw;
    EXPECT_EQ(copied.to_vector<float>(), want_copy.to_vector<float>()) << "draw " << draw;
  }
}

// The blocks the captured work used are the graph's, those it allocated and those it let go
// (made before the capture, and kept): tensors made after the capture never get them, so a
// launch cannot overwrite them.
TEST(DeviceGraph, ItsMemoryIsNeverHandedToOtherTensors) {
  DARK_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const Tensor w = Tensor::randn({64, 64}, 4, 1).to(gpu);
  const Tensor x = Tensor::randn({64, 64}, 4, 0).to(gpu);
  Tensor copied = Tensor::empty({64, 64}, DType::f32, gpu), out;
  // Eager blocks of the intermediates' size in the cache: the capture takes them over.
  { const Tensor a = Tensor::empty({64, 64}, DType::f32, gpu), b = Tensor::empty({64, 64}, DType::f32, gpu); }
  Tensor scratch = Tensor::empty({64, 64}, DType::f32, gpu);  // made before the capture, let go inside it
  const DeviceGraph graph(gpu, [&] {
    out = graph_work(x, w, copied);
    Tensor s = std::move(scratch);
    s.copy_(x);
  });
  EXPECT_GE(graph.pool_bytes(), 2 * 64 * 64 * sizeof(float)) << "the intermediates' blocks";
  std::vector<Tensor> others;
  for (int i = 0; i < 4; ++i) others.push_back(Tensor::full({64, 64}, 7.0, DType::f32, gpu));
  graph.launch();
  for (const Tensor& t : others)
    EXPECT_EQ(sum(t).item(), 7.0 * 64 * 64) << "a launch wrote into a tensor made after the capture";
  Tensor want_copy = Tensor::empty({64, 64}, DType::f32, gpu);
  EXPECT_EQ(out.to_vector<float>(), graph_work(x, w, want_copy).to_vector<float>());
}

// A tensor made before the capture that the captured work reads is kept by the graph: its
// owner may let go of it (a cache dropping a table) and no later tensor gets its memory.
TEST(DeviceGraph, KeepsTheTensorsItUsesThatItDidNotMake) {
  DARK_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const std::vector<float> table_values = Tensor::randn({64, 64}, 6, 0).to_vector<float>();
  Tensor table = Tensor::from_vector(table_values, {64, 64}).to(gpu);
  const Tensor x = Tensor::randn({64, 64}, 6, 1).to(gpu);
  Tensor out;
  const DeviceGraph graph(gpu, [&] { out = add(x, table); });
  table = Tensor();  // its owner lets go
  std::vector<Tensor> others;
  for (int i = 0; i < 4; ++i) others.push_back(Tensor::full({64, 64}, 7.0, DType::f32, gpu));
  graph.launch();
  EXPECT_EQ(out.to_vector<float>(), add(x, Tensor::from_vector(table_values, {64, 64}).to(gpu)).to_vector<float>());
}

// A capture records device work; anything that needs the host meanwhile is refused with an
// error naming it, and a failed capture leaves the device as it was (eager work runs, a new
// capture can start).
TEST(DeviceGraph, ACaptureRefusesHostCopiesAndReadsAndRecovers) {
  DARK_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const Tensor x = Tensor::randn({32}, 5, 0).to(gpu);
  const std::string upload = error_of([&] { DeviceGraph g(gpu, [&] { (void)add(x, Tensor::ones({32}).to(gpu)); }); });
  EXPECT_NE(upload.find("from cpu to cuda:0 inside a CUDA graph capture"), std::string::npos) << upload;
  const std::string read = error_of([&] { DeviceGraph g(gpu, [&] { (void)sum(x).item(); }); });
  EXPECT_NE(read.find("from cuda:0 to cpu inside a CUDA graph capture"), std::string::npos) << read;
  const std::string cpu = error_of([&] { DeviceGraph g(Device::cpu(), [] {}); });
  EXPECT_NE(cpu.find("needs a CUDA device"), std::string::npos) << cpu;
  // Eager work after the failures, then a capture that works.
  EXPECT_NEAR(sum(x).item(), sum(x.to(Device::cpu())).item(), 1e-4);
  Tensor doubled;
  const DeviceGraph g(gpu, [&] { doubled = mul_scalar(x, 2.0); });
  g.launch();
  EXPECT_EQ(doubled.to_vector<float>(), mul_scalar(x, 2.0).to_vector<float>());
}

#if defined(DARK_TEST_ON_CUDA_EMULATOR)
// What CUDA refuses inside a capture the emulator refuses too (so the tests above would catch
// work that bypasses the backend): a kernel on the legacy stream, a synchronisation.
TEST(DeviceGraph, TheEmulatorRefusesLegacyStreamWorkAndSynchronisationInACapture) {
  const Device gpu = Device::cuda(0);
  const Tensor x = Tensor::randn({32}, 5, 0).to(gpu);
  const std::string sync = error_of([&] { DeviceGraph g(gpu, [&] { backend_for(DeviceType::cuda).synchronize(0); }); });
  EXPECT_NE(sync.find("cudaErrorStreamCaptureUnsupported"), std::string::npos) << sync;
  const std::uint64_t launched = cuda_emu::graph_launches();
  Tensor y;
  const DeviceGraph g(gpu, [&] { y = add(x, x); });
  g.launch();
  g.launch();
  EXPECT_EQ(cuda_emu::graph_launches() - launched, 2u);
}

// cuBLAS picks its algorithm by the workspace it has, so eager and captured products run on
// the same one of ours (a graph step then gives the eager step's bits on a GPU too).
TEST(DeviceGraph, EagerAndCapturedProductsRunOnOurWorkspace) {
  const Device gpu = Device::cuda(0);
  const Tensor w = Tensor::randn({16, 24}, 3, 1).to(gpu), x = Tensor::randn({8, 16}, 3, 0).to(gpu);
  const std::uint64_t before = cuda_emu::gemms_on_cublas_workspace();
  Tensor eager = matmul(x, w), captured;
  const DeviceGraph g(gpu, [&] { captured = matmul(x, w); });
  g.launch();
  eager = matmul(x, w);
  EXPECT_EQ(cuda_emu::gemms_on_cublas_workspace() - before, 0u);
  EXPECT_EQ(captured.to_vector<float>(), eager.to_vector<float>());
}
#endif

TEST(Gpu, NoDeviceIsReportedAsUnavailableNotAsACrash) {
  // Runs everywhere: on a machine without a driver this must be false, not throw.
  EXPECT_NO_THROW(cuda_available());
  if (!cuda_available()) EXPECT_EQ(cuda_device_count(), 0);
}

}  // namespace
}  // namespace dark::testing
