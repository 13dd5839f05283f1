// Linking the CUDA emulator is not enough to make it a program's CUDA backend: until
// cuda_emu::install() runs, "cuda" is served by what the build has (the CUDA runtime, or the
// stub of a build without CUDA) and so are the cuda kernels. Before, loading the library
// silently turned every "cuda" tensor of a process into CPU memory.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/backend.h"
#include "core/kernels.h"
#include "core/tensor.h"
#include "cuda_emulator/control.h"

namespace dark {
namespace {

// One test, in order: install() changes the process for good.
TEST(CudaEmulatorInstall, LinkingTheEmulatorChangesNothingUntilATestInstallsIt) {
  EXPECT_FALSE(cuda_emu::active());
  const std::string before = backend_name(DeviceType::cuda);
  EXPECT_NE(before, cuda_emu::kBackendName);
#if defined(DARK_WITH_CUDA)
  EXPECT_EQ(before, "the CUDA runtime");
  EXPECT_TRUE(kernels::binary().has(DeviceType::cuda, DType::f32));
#else
  EXPECT_FALSE(cuda_backend_built());
  EXPECT_FALSE(kernels::binary().has(DeviceType::cuda, DType::f32));
#endif
  kernels::binary_fn* const real_binary = kernels::binary().find(DeviceType::cuda, DType::f32);

  cuda_emu::install();
  EXPECT_TRUE(cuda_emu::active());
  EXPECT_STREQ(backend_name(DeviceType::cuda), cuda_emu::kBackendName);
  EXPECT_TRUE(cuda_backend_built());
  EXPECT_NE(kernels::binary().find(DeviceType::cuda, DType::f32), real_binary);
  const Tensor a = Tensor::arange(4, DType::f32, Device::cuda(0));
  Tensor sum = Tensor::empty({4}, DType::f32, Device::cuda(0));
  kernels::binary().get(DeviceType::cuda, DType::f32)(BinaryOp::add, a, a, sum);
  EXPECT_EQ(sum.to_vector<float>(), (std::vector<float>{0, 2, 4, 6}));

  cuda_emu::install();  // a second call changes nothing
  EXPECT_TRUE(cuda_emu::active());
}

}  // namespace
}  // namespace dark
