// dist_collectives: the collective cases of tests/dist_cases.h on the CPU, as one GoogleTest
// program with its own main, run by every rank of an mpirun job (the mpi backend) or as a
// plain process (the single backend): the backend comes from the environment
// (make_communicator(auto)), or from DARK_TEST_BACKEND=single|mpi|auto.
//
// Every rank checks its own results and prints its failures prefixed "[rank r]"; only rank 0
// prints GoogleTest's progress. At the end the ranks all-reduce their outcome, so every rank
// (and so mpirun) exits non-zero when any rank failed.
//
// Flags (after GoogleTest's own): --max-chunk-bytes N  the mpi backend's largest MPI call, in
// bytes (small values run its chunked paths on small tensors).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>

#include "tests/dist_cases.h"
#include "train/dist/communicator.h"
#include "train/dist/leak_check_under_mpirun.h"  // once per program (see there)
#ifdef DARK_WITH_MPI
#include "train/dist/mpi_communicator.h"
#endif

namespace dark::testing {
namespace {

dist::Communicator* g_comm = nullptr;

TEST(Collectives, AllReduce) { dist_cases::all_reduce_cases(*g_comm); }
TEST(Collectives, ReduceScatter) { dist_cases::reduce_scatter_cases(*g_comm); }
TEST(Collectives, AllGather) { dist_cases::all_gather_cases(*g_comm); }
TEST(Collectives, Broadcast) { dist_cases::broadcast_cases(*g_comm); }
TEST(Collectives, Barrier) { dist_cases::barrier_cases(*g_comm); }
TEST(Collectives, NonBlockingWaitedInAnyOrder) { dist_cases::async_cases(*g_comm); }
TEST(Collectives, BadArgumentsAreErrors) { dist_cases::argument_error_cases(*g_comm); }

// Prints each failed assertion with this process's rank, on every rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.message());
  }

 private:
  int rank_;
};

dist::BackendKind backend_from_environment() {
  const char* text = std::getenv("DARK_TEST_BACKEND");
  return text && *text ? parse_enum<dist::BackendKind>(text, "DARK_TEST_BACKEND") : dist::BackendKind::automatic;
}

int run(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::int64_t max_chunk_bytes = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--max-chunk-bytes" && i + 1 < argc) {
      max_chunk_bytes = std::atoll(argv[++i]);
    } else {
      std::fprintf(stderr, "dist_collectives: unknown argument '%s' (flags: --max-chunk-bytes N, GoogleTest's)\n",
                   arg.c_str());
      return 2;
    }
  }
  std::unique_ptr<dist::Communicator> comm = dist::make_communicator(backend_from_environment(), Device::cpu(), 60);
  if (max_chunk_bytes > 0) {
#ifdef DARK_WITH_MPI
    auto* mpi = dynamic_cast<dist::MpiCommunicator*>(comm.get());
    if (!mpi) throw Error("--max-chunk-bytes applies to the mpi backend only; this is " + comm->describe());
    mpi->set_max_chunk_bytes(max_chunk_bytes);
#else
    throw Error("--max-chunk-bytes applies to the mpi backend, and this build has no MPI");
#endif
  }
  g_comm = comm.get();
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (comm->rank() != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new RankFailurePrinter(comm->rank()));
  if (comm->rank() == 0) std::printf("dist_collectives: %s\n", comm->describe().c_str());

  const int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  Tensor any_failed = Tensor::full({1}, failed, DType::i32);
  comm->all_reduce(any_failed, dist::ReduceOp::max);
  const bool ok = any_failed.item() == 0;
  if (comm->rank() == 0)
    std::printf("dist_collectives: %s on all %d rank(s)\n", ok ? "passed" : "FAILED", comm->world_size());
  g_comm = nullptr;
  comm.reset();
  dist::finalize();
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace dark::testing

int main(int argc, char** argv) {
  try {
    return dark::testing::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_collectives: %s\n", e.what());
    dark::dist::abort_job(1);
  }
}
