// The backend registry and kernel tables take one registration per entry: a second one is
// refused with an error naming both, instead of the library loaded last winning silently.
#include <gtest/gtest.h>

#include <string>

#include "core/backend.h"
#include "core/dispatch.h"
#include "test_util.h"

namespace dark {
namespace {

struct FakeBackend final : DeviceBackend {
  RawAllocator raw_allocator() const override { return backend_for(DeviceType::cpu).raw_allocator(); }
  int device_count() const override { return 7; }
  void copy(void*, Device, const void*, Device, std::size_t) const override {}
  void synchronize(int) const override {}
};

TEST(BackendRegistry, ASecondBackendForADeviceIsRefusedAndTheFirstStays) {
  static FakeBackend fake;
  const std::string e = testing::error_of([] { register_backend(DeviceType::cpu, &fake, "a fake backend"); });
  EXPECT_NE(e.find("cpu is already served by the built-in CPU backend"), std::string::npos) << e;
  EXPECT_NE(e.find("refusing to replace it with a fake backend"), std::string::npos) << e;
  EXPECT_NE(&backend_for(DeviceType::cpu), &fake);
  EXPECT_STREQ(backend_name(DeviceType::cpu), "the built-in CPU backend");
}

TEST(BackendRegistry, CudaIsServedByWhatThisBuildHas) {
#if defined(DARK_WITH_CUDA)
  EXPECT_STREQ(backend_name(DeviceType::cuda), "the CUDA runtime");
  EXPECT_TRUE(cuda_backend_built());
#else
  EXPECT_STREQ(backend_name(DeviceType::cuda), "no CUDA backend (built with DARK_USE_CUDA=OFF)");
  EXPECT_FALSE(cuda_backend_built());
#endif
}

int one(int) { return 1; }
int two(int) { return 2; }

TEST(KernelTable, ASecondKernelForAnEntryIsRefusedUnlessReplacedOnPurpose) {
  KernelTable<int(int)> table("demo");
  table.set(DeviceType::cpu, DType::f32, &one);
  const std::string e = testing::error_of([&] { table.set(DeviceType::cpu, DType::f32, &two); });
  EXPECT_NE(e.find("demo: a second kernel registered for cpu/f32"), std::string::npos) << e;
  EXPECT_EQ(table.get(DeviceType::cpu, DType::f32)(0), 1);
  table.set(DeviceType::cpu, DType::f64, &two);  // another entry is fine
  table.replace(DeviceType::cpu, DType::f32, &two);
  EXPECT_EQ(table.get(DeviceType::cpu, DType::f32)(0), 2);
}

}  // namespace
}  // namespace dark
