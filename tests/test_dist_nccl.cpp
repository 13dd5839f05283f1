// The nccl backend on one GPU: a world of one (no mpirun: make_communicator makes its
// ncclUniqueId locally) on cuda:0 runs every collective case of tests/dist_cases.h. Skips
// (visibly) when no GPU can run kernels; the error cases run everywhere.
#include <gtest/gtest.h>

#include <memory>

#include "core/backend.h"
#include "tests/dist_cases.h"
#include "tests/test_util.h"
#include "train/dist/communicator.h"

namespace dark::testing {
namespace {


#ifdef DARK_WITH_NCCL
class NcclOneGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (cuda_available() && !dist::launched_by_mpi())
      comm_ = dist::make_communicator(dist::BackendKind::nccl, Device::cuda(0), 60);
  }
  static void TearDownTestSuite() { comm_.reset(); }
  void SetUp() override {
    DARK_REQUIRE_GPU();
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
