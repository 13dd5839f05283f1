// What keeps a first run of the GPU kernels that have never run on a GPU safe, on the CUDA
// emulator (an H100 here), each net shown to catch what it is for:
//   - a Hopper flash kernel (flash_attention_sm90*.cu) that starts with fewer registers than
//     its register split needs (setmaxnreg would wait forever) is never launched: its
//     configuration runs on the mma.sync kernels, with a warning naming the kernel and both
//     counts;
//   - a pipeline whose barrier protocol is broken (an arrival lost) ends the process (the
//     trap's sticky error) with a message that names the kernel, block, warp and barrier,
//     instead of hanging;
//   - Hopper results that differ from the mma.sync kernels' at a configuration's first call
//     (its self-check) are caught: an error names the kernel, the configuration and the
//     difference, and the process goes on with the mma.sync kernels' numbers;
//   - the same for the tensor-core random-feature kernels against their f32 kernels
//     (bf16_reference_check.h): the process goes on with the f32 kernels' numbers.
// The emulator's hooks (control.h, grid.h, wgmma.h) make each fault. The checks remember their
// verdicts for the process, so each test uses configurations (head dimension, causal,
// window, key mask; feature widths) that no other test of this program uses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/kernels.h"
#include "cuda_emulator/control.h"
#include "cuda_emulator/grid.h"
#include "cuda_emulator/wgmma.h"
#include "test_util.h"

namespace dark::testing {
namespace {

struct Attention {
  std::vector<float> out, dq, dk, dv;
  bool operator==(const Attention&) const = default;
};

// Forward and backward of bf16 flash attention (2 query heads on 1 kv head, T = S = 130) on the GPU.
Attention attention(std::int64_t d, bool causal, std::int64_t window = 0) {
  const Device gpu = Device::cuda(0);
  auto input = [&](std::int64_t heads, std::uint64_t stream) {
    return Tensor::randn({1, 130, heads, d}, 21, stream, DType::f32, gpu).to(DType::bf16).set_requires_grad(true);
  };
  Tensor q = input(2, 0), k = input(1, 1), v = input(1, 2);
  const Tensor out = flash_attention(q, k, v, causal, 0.1, Tensor(), window);
  backward(out, Tensor::randn(out.shape(), 21, 3, DType::f32, gpu).to(DType::bf16));
  auto values = [](const Tensor& x) { return x.to(DType::f32).to(Device::cpu()).to_vector<float>(); };
  return {values(out.detach()), values(q.grad()), values(k.grad()), values(v.grad())};
}

// The same on the mma.sync kernels.
Attention attention_on_mma_sync(std::int64_t d, bool causal, std::int64_t window = 0) {
  EXPECT_EQ(setenv("DARK_FLASH_SM90", "off", 1), 0);
  const Attention a = attention(d, causal, window);
  unsetenv("DARK_FLASH_SM90");
  return a;
}

// Hopper and mma.sync results agree to bf16 rounding (they sum in other orders).
void expect_near(const Attention& got, const Attention& want) {
  for (const auto& [g, w] : {std::pair{&got.out, &want.out}, std::pair{&got.dq, &want.dq}, std::pair{&got.dk, &want.dk},
                             std::pair{&got.dv, &want.dv}}) {
    ASSERT_EQ(g->size(), w->size());
    for (std::size_t i = 0; i < g->size(); ++i) ASSERT_NEAR((*g)[i], (*w)[i], 2e-2 + 2e-2 * std::fabs((*w)[i])) << i;
  }
}

TEST(Sm90SafetyNets, AKernelWithTooFewRegistersFallsBackWithAWarning) {
  DARK_REQUIRE_GPU();
  const Attention want = attention_on_mma_sync(64, false);
  cuda_emu::set_function_registers(160);  // 128 (160 - 40) < 256 (232 - 160): the split cannot be served
  ::testing::internal::CaptureStdout();
  const std::uint64_t before = cuda_emu::wgmma_issued();
  const Attention got = attention(64, false);
  const std::uint64_t after = cuda_emu::wgmma_issued();
  cuda_emu::set_function_registers(cuda_emu::kDefaultFunctionRegisters);
  const std::string log = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(after, before) << "a Hopper kernel ran with too few registers";
  EXPECT_TRUE(got == want) << "the fallback is not the mma.sync kernels' numbers";
  for (const char* kernel : {"forward_sm90_kernel<64>", "dq_sm90_kernel<64>", "dkv_sm90_kernel<64>"})
    EXPECT_NE(log.find(str("the sm_90 kernel ", kernel, " starts with 160 registers a thread, but its register split "
                           "needs 168")),
              std::string::npos)
        << log;
  EXPECT_NE(log.find("falls back to the mma.sync kernels"), std::string::npos) << log;
}

// `text` as a POSIX extended regular expression that matches it literally (gtest's death
// tests match the child's stderr with one).
std::string literally(const std::string& text) {
  std::string re;
  for (char c : text) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) re += '\\';
    re += c;
  }
  return re;
}

// The lost arrival is the first of the Q tile's 128: the computing warps of the first block
// wait for Q forever, and its loader, done loading, waits for them to finish until the hang
// limit. On the emulator that time passes on its skipping clock (grid.h): a moment. Then the
// loader __trap()s, which on a GPU breaks the process's CUDA context for good (a sticky
// error: every later CUDA call fails), as the emulator models it: the process ends with the
// hang report and exit 70 (cuda_check.h), and what goes on is scripts/gpu-check.sh's
// process-level fallback (tests/gpu_check_flash_fallback.sh, mode trap), not this process.
TEST(Sm90SafetyNetsDeathTest, ABrokenBarrierProtocolEndsTheProcessWithTheHangReportInsteadOfHanging) {
  DARK_REQUIRE_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child runs this test alone, from its start
  ASSERT_EQ(setenv("DARK_FLASH_SM90", "on", 1), 0);  // no self-check: the broken launch is the first one
  const Device gpu = Device::cuda(0);
  const Tensor q = Tensor::randn({1, 600, 2, 128}, 5, 0, DType::f32, gpu).to(DType::bf16);
  const Tensor k = Tensor::randn({1, 600, 1, 128}, 5, 1, DType::f32, gpu).to(DType::bf16);
  const std::string report =
      "__trap(): cudaErrorLaunchFailure (unspecified launch failure); forward_sm90_kernel<128>, K, V tiles: block (0, "
      "0, 0) warp 8 (loading) waited over 4 s for every computing warp to finish (mbarrier done, phase parity 0): a "
      "computing warp waits forever";
  const std::string advice =
      "the error is sticky: this process's CUDA context is broken and every later CUDA call would fail, so the "
      "process ends here (exit 70). Run it again; a Hopper (sm_90) flash kernel hung: DARK_FLASH_SM90=off";
  EXPECT_EXIT(
      {
        cuda_emu::drop_mbarrier_arrivals(1);
        try {
          flash_attention(q, k, k, true, 0.1, Tensor(), 300);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "the hang was thrown, the process went on: %s\n", e.what());
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(70)  /* cuda_check.h: kStickyErrorExitCode */,
      "darkformer: fatal CUDA error: CUDA emulator: [^\n]*" + literally(report) + ".*" + literally(advice));
  unsetenv("DARK_FLASH_SM90");
  EXPECT_FALSE(cuda_emu::context_broken()) << "the trap happened in this process, not in the death test's child";
}

TEST(Sm90SafetyNets, ACorruptedHopperResultIsCaughtAndTheMmaSyncKernelsGoOn) {
  DARK_REQUIRE_GPU();
  const Attention want = attention_on_mma_sync(256, true);
  cuda_emu::corrupt_wgmma_products(0.25f);
  ::testing::internal::CaptureStdout();
  const Attention got = attention(256, true);
  const std::uint64_t before = cuda_emu::wgmma_issued();
  const Attention again = attention(256, true);
  const std::uint64_t after = cuda_emu::wgmma_issued();
  cuda_emu::corrupt_wgmma_products(0.0f);
  const std::string log = ::testing::internal::GetCapturedStdout();
  EXPECT_TRUE(got == want) << "the corrupted Hopper results were used";
  EXPECT_TRUE(again == want);
  EXPECT_EQ(after, before) << "the Hopper kernels ran again after their self-check failed";
  for (const char* what : {"self-check failed: the sm_90 kernels forward_sm90_kernel<256> (forward, d 256, causal)",
                           "self-check failed: the sm_90 kernels dq_sm90_kernel<256> / dkv_sm90_kernel<256> "
                           "(backward, d 256, causal)",
                           "falls back to the mma.sync kernels for forward, d 256, causal"})
    EXPECT_NE(log.find(what), std::string::npos) << what << "\n" << log;
}

// Clean Hopper kernels pass their self-check and run.
TEST(Sm90SafetyNets, CleanHopperKernelsPassTheSelfCheckAndRun) {
  DARK_REQUIRE_GPU();
  ::testing::internal::CaptureStdout();
  const std::uint64_t before = cuda_emu::wgmma_issued();
  const Attention got = attention(64, true, 40);
  const std::uint64_t after = cuda_emu::wgmma_issued();
  const std::string log = ::testing::internal::GetCapturedStdout();
  EXPECT_GT(after, before);
  EXPECT_EQ(log.find("self-check failed"), std::string::npos) << log;
  expect_near(got, attention_on_mma_sync(64, true, 40));
}

TEST(Sm90SafetyNets, AnUnknownSwitchValueIsAnError) {
  DARK_REQUIRE_GPU();
  ASSERT_EQ(setenv("DARK_FLASH_SM90", "maybe", 1), 0);
  const std::string error = error_of([] { attention(128, false); });
  unsetenv("DARK_FLASH_SM90");
  EXPECT_NE(error.find("DARK_FLASH_SM90 is 'maybe': expected check (the default), on or off"), std::string::npos)
      << error;
}

// One call of the fused random-feature attention's bf16 kernels (forward, then backward) on
// inputs drawn in bf16, and the same on the f32 kernels with those inputs widened, rounded
// to bf16: the numbers a fallback gives, bit for bit.
struct RandomFeatureCall {
  std::int64_t m, r;
  std::vector<std::vector<float>> bf16, f32_rounded;
};
RandomFeatureCall random_feature_call(std::int64_t m, std::int64_t r, std::int64_t t = 70) {
  const Device gpu = Device::cuda(0);
  auto draw = [&](const Shape& shape, std::uint64_t stream) {
    return Tensor::randn(shape, 31, stream, DType::f32, gpu).to(DType::bf16);
  };
  const std::int64_t b = 1, hq = 2, hkv = 1, dv = 16;
  const std::vector<Tensor> inputs = {draw({b, t, hq, r}, 0), draw({b, t, hkv, r}, 1), draw({b, t, hkv, dv}, 2),
                                      draw({hkv, m, r}, 3), draw({b, t, hq, dv}, 4)};
  auto run = [&](DType dtype) {
    std::vector<Tensor> x;
    for (const Tensor& in : inputs) x.push_back(in.to(dtype));
    Tensor out = Tensor::empty({b, t, hq, dv}, dtype, gpu), den = Tensor::empty({b, hq, t}, dtype, gpu);
    Tensor dxq = Tensor::empty(x[0].shape(), dtype, gpu), dxk = Tensor::empty(x[1].shape(), dtype, gpu);
    Tensor dv_ = Tensor::empty(x[2].shape(), dtype, gpu), domega = Tensor::empty(x[3].shape(), dtype, gpu);
    Tensor no_log_norm;
    kernels::random_feature_attention_forward().get(DeviceType::cuda, dtype)(x[0], x[1], x[2], x[3], Tensor(), Tensor(),
                                                                             out, den, no_log_norm, true, 1e-6, 16);
    // The backward reads the forward's outputs as a bf16 call has them.
    const Tensor out_read = out.to(DType::bf16).to(dtype), den_read = den.to(DType::bf16).to(dtype);
    kernels::random_feature_attention_backward().get(DeviceType::cuda, dtype)(
        x[0], x[1], x[2], x[3], Tensor(), Tensor(), out_read, den_read, x[4], Tensor(), dxq, dxk, dv_, domega, true,
        16);
    std::vector<std::vector<float>> values;
    for (const Tensor& y : {out, den, dxq, dxk, dv_, domega})
      values.push_back(y.to(DType::bf16).to(DType::f32).to(Device::cpu()).to_vector<float>());
    return values;
  };
  return {m, r, run(DType::bf16), run(DType::f32)};
}

TEST(TensorCoreSafetyNets, ACorruptedRandomFeatureResultIsCaughtAndTheF32KernelsGoOn) {
  DARK_REQUIRE_GPU();
  cuda_emu::corrupt_mma_products(0.5f);
  ::testing::internal::CaptureStdout();
  const RandomFeatureCall call = random_feature_call(24, 40);
  cuda_emu::corrupt_mma_products(0.0f);
  const std::string log = ::testing::internal::GetCapturedStdout();
  EXPECT_TRUE(call.bf16 == call.f32_rounded) << "the corrupted tensor-core results were used";
  for (const char* op : {"random_feature_attention_forward", "random_feature_attention_backward"})
    EXPECT_NE(log.find(str(op, ": self-check failed: the bf16 (tensor-core) kernel differs from the f32 kernel")),
              std::string::npos)
        << op << "\n" << log;
  EXPECT_NE(log.find("falls back to the f32 kernel for random_feature_attention_forward"), std::string::npos) << log;
}

TEST(TensorCoreSafetyNets, CleanRandomFeatureKernelsPassTheSelfCheckAndRun) {
  DARK_REQUIRE_GPU();
  ::testing::internal::CaptureStdout();
  const RandomFeatureCall call = random_feature_call(40, 24);
  const std::string log = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(log.find("self-check failed"), std::string::npos) << log;
  EXPECT_FALSE(call.bf16 == call.f32_rounded) << "the f32 kernels ran where the bf16 ones should have";
  // The forward's outputs (the backward's differ by more: each side reads its own forward's)
  for (std::size_t o = 0; o < 2; ++o)
    for (std::size_t i = 0; i < call.bf16[o].size(); ++i)
      ASSERT_NEAR(call.bf16[o][i], call.f32_rounded[o][i], 5e-2 + 5e-2 * std::fabs(call.f32_rounded[o][i]))
          << "output " << o << " element " << i;
}

// A verdict holds for its length class only (the power of 4 at or above the length): a
// configuration checked clean at 70 tokens is not checked again at 250 (class 256), so
// products corrupted since then go through there, but it is checked again at 300 (class 1024),
// where the corruption is caught.
TEST(TensorCoreSafetyNets, EachLengthClassIsCheckedAtItsFirstCall) {
  DARK_REQUIRE_GPU();
  ::testing::internal::CaptureStdout();
  const RandomFeatureCall clean = random_feature_call(56, 24, 70);
  cuda_emu::corrupt_mma_products(0.5f);
  const RandomFeatureCall same_class = random_feature_call(56, 24, 250);
  const std::string same_class_log = ::testing::internal::GetCapturedStdout();
  ::testing::internal::CaptureStdout();
  const RandomFeatureCall longer = random_feature_call(56, 24, 300);
  cuda_emu::corrupt_mma_products(0.0f);
  const std::string longer_log = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(same_class_log.find("self-check failed"), std::string::npos) << same_class_log;
  EXPECT_FALSE(same_class.bf16 == same_class.f32_rounded) << "the class of 250 tokens was checked again";
  EXPECT_TRUE(longer.bf16 == longer.f32_rounded) << "the corrupted tensor-core results were used at 300 tokens";
  EXPECT_NE(longer_log.find("self-check failed"), std::string::npos) << longer_log;
  EXPECT_NE(longer_log.find("random_feature_attention_forward on cuda:0, length <= 1024:"), std::string::npos)
      << longer_log;
}

}  // namespace
}  // namespace dark::testing
