// Choosing a communicator backend in a plain process (no mpirun): launched_by_mpi reads
// the launcher's environment; make_communicator(auto) gives the single backend, and forced
// backends that cannot work here are errors that say why. The single backend's collectives
// run in tests/mpi/ (dist_collectives_single); here, its identity and abort_job.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "train/dist/communicator.h"

namespace dark::testing {
namespace {

using dist::BackendKind;

// Sets (or, with nullopt, unsets) environment variables for its lifetime.
class ScopedEnv {
 public:
  ScopedEnv(const std::string& name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name.c_str())) old_ = old;
    if (value)
      ::setenv(name.c_str(), value->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// No launcher variable at all, whatever ran this test.
struct NoLauncher {
  ScopedEnv a{"OMPI_COMM_WORLD_SIZE", std::nullopt}, b{"PMIX_RANK", std::nullopt}, c{"PMI_SIZE", std::nullopt};
};

TEST(DistBackend, LaunchedByMpiReadsTheLaunchersEnvironment) {
  NoLauncher none;
  EXPECT_FALSE(dist::launched_by_mpi());
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"}) {
    ScopedEnv set(name, "2");
    EXPECT_TRUE(dist::launched_by_mpi()) << name;
  }
  ScopedEnv empty("OMPI_COMM_WORLD_SIZE", "");
  EXPECT_FALSE(dist::launched_by_mpi()) << "an empty variable is no launcher";
}

TEST(DistBackend, AutomaticInAPlainProcessIsSingle) {
  NoLauncher none;
  for (Device device : {Device::cpu(), Device::cuda(0)}) {
    const auto comm = dist::make_communicator(BackendKind::automatic, device, 600);
    EXPECT_EQ(comm->backend(), BackendKind::single);
    EXPECT_EQ(comm->rank(), 0);
    EXPECT_EQ(comm->world_size(), 1);
    EXPECT_EQ(comm->local_rank(), 0);
    EXPECT_EQ(comm->device(), device);
    EXPECT_EQ(comm->describe(), "single (rank 0 of 1) on " + device.to_string());
  }
}

TEST(DistBackend, ForcedMpiWithoutMpirunIsAClearError) {
  NoLauncher none;
#ifdef DARK_WITH_MPI
  EXPECT_EQ(error_of([] { dist::make_communicator(BackendKind::mpi, Device::cpu(), 600); }),
            "distributed.backend = mpi, but this process was not started by mpirun (no OMPI_COMM_WORLD_SIZE, "
            "PMIX_RANK or PMI_SIZE in its environment): start it with `mpirun -np N darkformer ...`, or use "
            "backend auto or single");
#else
  expect_error([] { dist::make_communicator(BackendKind::mpi, Device::cpu(), 600); },
               {"distributed.backend = mpi, but this build has no MPI", "-DDARK_USE_MPI=ON"});
#endif
}

#ifdef DARK_WITH_MPI
TEST(DistBackend, MpiServesTheCpuOnly) {
  ScopedEnv launched("OMPI_COMM_WORLD_SIZE", "1");  // checked before MPI is touched
  expect_error([] { dist::make_communicator(BackendKind::mpi, Device::cuda(0), 600); },
               {"distributed.backend = mpi moves CPU tensors, but the run's device is cuda:0",
                "use nccl (or auto)"});
}
#endif

#ifndef DARK_WITH_NCCL  // with NCCL, tests/test_dist_nccl.cpp covers the nccl backend
TEST(DistBackend, AutomaticForCudaUnderMpirunNeedsNccl) {
  ScopedEnv launched("OMPI_COMM_WORLD_SIZE", "2");
  expect_error([] { dist::make_communicator(BackendKind::automatic, Device::cuda(0), 600); },
               {"distributed.backend = auto (nccl: a CUDA run under mpirun), but this build has no NCCL"});
}
#endif

TEST(DistBackend, SingleAmongManyRanksIsAnError) {
  ScopedEnv launched("OMPI_COMM_WORLD_SIZE", "4");
  expect_error([] { dist::make_communicator(BackendKind::single, Device::cpu(), 600); },
               {"distributed.backend = single, but this process is one of 4 ranks started by mpirun",
                "each would train alone"});
}

TEST(DistBackend, TimeoutMustBePositive) {
  NoLauncher none;
  for (double bad : {0.0, -1.0, std::nan("")})
    expect_error([=] { dist::make_communicator(BackendKind::automatic, Device::cpu(), bad); },
                 {"distributed.timeout_s must be > 0 seconds"});
  EXPECT_NO_THROW(dist::make_communicator(BackendKind::single, Device::cpu(),
                                          std::numeric_limits<double>::infinity()));
}

TEST(DistBackend, SingleCopiesInToOutAndKeepsInPlace) {
  NoLauncher none;
  const auto comm = dist::make_communicator(BackendKind::single, Device::cpu(), 600);
  Tensor in = Tensor::from_vector<float>({1, 2, 3}, {3});
  Tensor out = Tensor::zeros({3});
  comm->reduce_scatter(in, out);
  EXPECT_EQ(values(out), (std::vector<double>{1, 2, 3}));
  comm->all_gather(in, out);
  EXPECT_EQ(values(out), (std::vector<double>{1, 2, 3}));
  comm->reduce_scatter(in, in);  // in place: the whole of a world of one
  comm->all_reduce(in, dist::ReduceOp::max);
  comm->broadcast(in, 0);
  EXPECT_EQ(values(in), (std::vector<double>{1, 2, 3}));
  expect_error([&] { comm->broadcast(in, 1); }, {"broadcast: root 1 is not a rank of this world of 1"});
}

TEST(DistBackend, AbortJobInAPlainProcessExitsWithTheCode) {
  NoLauncher none;
  EXPECT_EXIT(dist::abort_job(3), ::testing::ExitedWithCode(3), "");
}

TEST(DistBackend, EnumNames) {
  EXPECT_EQ(parse_enum<BackendKind>("auto", "distributed.backend"), BackendKind::automatic);
  EXPECT_EQ(enum_choices<BackendKind>(), "auto, single, mpi, nccl");
  EXPECT_EQ(enum_name(dist::ReduceOp::max), "max");
}

}  // namespace
}  // namespace dark::testing
