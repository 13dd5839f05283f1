// Collectives on one GPU: every collective case of tests/dist_cases.h on cuda:0 through
//   - the single backend (what a one-GPU run uses: a world of one whose collectives are
//     argument checks and device copies), which also runs on the CUDA emulator
//     (test_dist_nccl_emulated);
//   - the nccl backend, a world of one (no mpirun: make_communicator makes its ncclUniqueId
//     locally), which needs a real GPU: NCCL would be handed the emulator's device pointers.
// The GPU cases skip (visibly) when no GPU can run kernels; the error cases run everywhere.
#include <gtest/gtest.h>

#include <memory>

#include "core/backend.h"
#include "tests/dist_cases.h"
#include "tests/test_util.h"
#include "train/dist/communicator.h"

namespace dark::testing {
namespace {

class SingleOnTheGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    DARK_REQUIRE_GPU();
    comm_ = dist::make_communicator(dist::BackendKind::single, Device::cuda(0), 60);
  }
  std::unique_ptr<dist::Communicator> comm_;
};

TEST_F(SingleOnTheGpu, IsAWorldOfOneOnCuda0) {
  EXPECT_EQ(comm_->backend(), dist::BackendKind::single);
  EXPECT_EQ(comm_->world_size(), 1);
  EXPECT_EQ(comm_->rank(), 0);
  EXPECT_EQ(comm_->device(), Device::cuda(0));
  EXPECT_EQ(comm_->describe(), "single (rank 0 of 1) on cuda:0");
}
TEST_F(SingleOnTheGpu, AllReduce) { dist_cases::all_reduce_cases(*comm_); }
TEST_F(SingleOnTheGpu, ReduceScatter) { dist_cases::reduce_scatter_cases(*comm_); }
TEST_F(SingleOnTheGpu, AllGather) { dist_cases::all_gather_cases(*comm_); }
TEST_F(SingleOnTheGpu, Broadcast) { dist_cases::broadcast_cases(*comm_); }
TEST_F(SingleOnTheGpu, NonBlockingWaitedInAnyOrder) { dist_cases::async_cases(*comm_); }
TEST_F(SingleOnTheGpu, BadArgumentsAreErrors) { dist_cases::argument_error_cases(*comm_); }

#ifdef DARK_WITH_NCCL
class NcclOneGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
#if !defined(DARK_TEST_ON_CUDA_EMULATOR)
    if (cuda_available() && !dist::launched_by_mpi())
      comm_ = dist::make_communicator(dist::BackendKind::nccl, Device::cuda(0), 60);
#endif
  }
  static void TearDownTestSuite() { comm_.reset(); }
  void SetUp() override {
    DARK_REQUIRE_GPU();
#if defined(DARK_TEST_ON_CUDA_EMULATOR)
    GTEST_SKIP() << "NCCL needs a real GPU: it would be handed the CUDA emulator's device pointers (host memory)";
#endif
    ASSERT_TRUE(comm_) << "run this test as a plain process: under mpirun the nccl world has more ranks";
  }
  static std::unique_ptr<dist::Communicator> comm_;
};
std::unique_ptr<dist::Communicator> NcclOneGpu::comm_;

TEST_F(NcclOneGpu, IsAWorldOfOneOnCuda0) {
  EXPECT_EQ(comm_->backend(), dist::BackendKind::nccl);
  EXPECT_EQ(comm_->world_size(), 1);
  EXPECT_EQ(comm_->rank(), 0);
  EXPECT_EQ(comm_->device(), Device::cuda(0));
  EXPECT_NE(comm_->describe().find("nccl rank 0 of 1"), std::string::npos) << comm_->describe();
}
TEST_F(NcclOneGpu, AllReduce) { dist_cases::all_reduce_cases(*comm_); }
TEST_F(NcclOneGpu, ReduceScatter) { dist_cases::reduce_scatter_cases(*comm_); }
TEST_F(NcclOneGpu, AllGather) { dist_cases::all_gather_cases(*comm_); }
TEST_F(NcclOneGpu, Broadcast) { dist_cases::broadcast_cases(*comm_); }
TEST_F(NcclOneGpu, Barrier) { dist_cases::barrier_cases(*comm_); }
TEST_F(NcclOneGpu, NonBlockingWaitedInAnyOrder) { dist_cases::async_cases(*comm_); }
TEST_F(NcclOneGpu, BadArgumentsAreErrors) { dist_cases::argument_error_cases(*comm_); }

TEST(NcclBackend, ACpuDeviceIsAnError) {
  expect_error([] { dist::make_communicator(dist::BackendKind::nccl, Device::cpu(), 60); },
               {"distributed.backend = nccl moves CUDA tensors", "device is cpu", "use mpi (or auto)"});
}
#else
TEST(NcclBackend, NotBuiltInIsAClearError) {
  expect_error([] { dist::make_communicator(dist::BackendKind::nccl, Device::cuda(0), 60); },
               {"distributed.backend = nccl, but this build has no NCCL", "-DDARK_USE_NCCL=ON"});
}
#endif

}  // namespace
}  // namespace dark::testing
