// Kernel profiles (core/kernel_profile.h): every kernel dispatched while a profile is alive
// is counted once, in its pass, and timed; nothing is recorded outside a profile.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/dispatch.h"
#include "core/kernel_profile.h"
#include "core/tensor.h"
#include "test_util.h"

namespace dark {
namespace {

const KernelProfile::Row* row_of(const std::vector<KernelProfile::Row>& rows, const std::string& pass,
                                 const std::string& kernel) {
  for (const auto& r : rows)
    if (r.pass == pass && r.kernel == kernel) return &r;
  return nullptr;
}

TEST(KernelProfile, CountsEachDispatchInItsPassAndTimesIt) {
  const Tensor a = Tensor::randn({256, 256}, 1), b = Tensor::randn({256, 256}, 2);
  (void)matmul(a, b);  // outside any profile: not counted
  const auto t0 = std::chrono::steady_clock::now();
  KernelProfile profile;
  {
    const ProfilePass pass("forward");
    (void)matmul(a, b);
    (void)add(a, b);
    (void)add(a, b);
  }
  {
    const ProfilePass pass("backward");
    (void)mul(a, b);
  }
  const std::vector<KernelProfile::Row> rows = profile.finish();
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  (void)add(a, b);  // after the profile: not counted

  const KernelProfile::Row* mm = row_of(rows, "forward", "matmul");
  const KernelProfile::Row* fwd_binary = row_of(rows, "forward", "binary");
  const KernelProfile::Row* bwd_binary = row_of(rows, "backward", "binary");
  ASSERT_TRUE(mm && fwd_binary && bwd_binary);
  EXPECT_EQ(mm->calls, 1);
  EXPECT_EQ(fwd_binary->calls, 2);
  EXPECT_EQ(bwd_binary->calls, 1);
  EXPECT_EQ(mm->device, DeviceType::cpu);
  double sum = 0;
  for (const auto& r : rows) {
    EXPECT_GE(r.ms, 0) << r.kernel;
    sum += r.ms;
  }
  EXPECT_GT(mm->ms, 0);  // 33 MFLOP
  EXPECT_LE(sum, wall_ms);
  for (std::size_t i = 1; i < rows.size(); ++i) EXPECT_GE(rows[i - 1].ms, rows[i].ms) << "largest first";
  // What the calls were handed: three 256 x 256 f32 tensors each; the product's 2 n^3 FLOPs.
  const double tensor_bytes = 256.0 * 256 * 4;
  EXPECT_EQ(mm->bytes, 3 * tensor_bytes);
  EXPECT_EQ(mm->flops, 2.0 * 256 * 256 * 256);
  EXPECT_EQ(fwd_binary->bytes, 2 * 3 * tensor_bytes);
  EXPECT_EQ(fwd_binary->flops, 0);
}

TEST(KernelProfile, OneAtATimeAndOffOnceFinished) {
  {
    KernelProfile profile;
    EXPECT_TRUE(KernelProfile::active());
    EXPECT_NE(testing::error_of([] { KernelProfile another; }).find("another profile is already running"),
              std::string::npos);
  }  // finished by its destructor
  EXPECT_FALSE(KernelProfile::active());
  KernelProfile next;
  EXPECT_TRUE(next.finish().empty());
}

// A kernel that dispatches another counts once, as itself.
KernelTable<int(int)>& inner_table() {
  static KernelTable<int(int)> table("inner");
  return table;
}
KernelTable<int(int)>& outer_table() {
  static KernelTable<int(int)> table("outer");
  return table;
}
int inner(int x) { return x + 1; }
int outer(int x) { return inner_table().get(DeviceType::cpu, DType::f32)(x) * 2; }

TEST(KernelProfile, AKernelInsideAKernelCountsInTheOuterOne) {
  inner_table().set(DeviceType::cpu, DType::f32, &inner);
  outer_table().set(DeviceType::cpu, DType::f32, &outer);
  KernelProfile profile;
  EXPECT_EQ(outer_table().get(DeviceType::cpu, DType::f32)(3), 8);
  const std::vector<KernelProfile::Row> rows = profile.finish();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].kernel, "outer");
  EXPECT_EQ(rows[0].pass, "");
  EXPECT_EQ(rows[0].calls, 1);
}

}  // namespace
}  // namespace dark
