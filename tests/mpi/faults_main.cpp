// dist_faults: one failing rank must end the whole job, quickly and with a message naming
// what happened, instead of leaving the other ranks waiting. Run under mpirun -np 2 by
// tests/mpi/expect_failure.sh, which asserts a non-zero exit, the time and the message.
//
//   dist_faults timeout  rank 1 sleeps instead of joining an all_reduce; rank 0 waits with
//                        timeout_s = 2, prints the timeout line and aborts the job.
//   dist_faults error    rank 1 fails (an exception) before the all_reduce and calls
//                        abort_job, as the trainer does; rank 0 (timeout 600 s) must not hang.
//   dist_faults exit     rank 1 dies (exits with 3, no finalize); rank 0 (timeout 600 s) must
//                        not hang: mpirun ends the job.
//   dist_faults mismatch the ranks all-reduce different sizes (a broken caller); MPI's error
//                        on the communication thread comes back from wait() on the rank
//                        that sees it, naming the MPI call, which aborts the job.
// Rank 1 sleeps 120 s where it should have been stopped, so a job that does not end fails the
// script's time limit.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include "core/error.h"
#include "train/dist/communicator.h"
#include "train/dist/leak_check_under_mpirun.h"  // once per program (see there)

namespace {

int run(const std::string& mode) {
  using namespace dark;
  // Beyond the script's 30 s, so only the abort can end the job in time.
  const double timeout_s = mode == "timeout" ? 2.0 : 600.0;
  auto comm = dist::make_communicator(dist::BackendKind::mpi, Device::cpu(), timeout_s);
  DARK_CHECK(comm->world_size() >= 2, "dist_faults needs 2 ranks or more (mpirun -np 2), got ", comm->world_size());
  comm->barrier();  // both ranks are up
  if (mode == "mismatch") {
    Tensor t = Tensor::ones({4 * (comm->rank() + 1)}, DType::f32);
    comm->all_reduce(t);
    comm->barrier();
    std::fprintf(stderr, "dist_faults: rank %d: mismatched all_reduce reported no error\n", comm->rank());
    return 0;
  }
  Tensor t = Tensor::ones({1 << 20}, DType::f32);
  if (comm->rank() == 1) {
    if (mode == "error") throw Error("rank 1 failed on purpose before its all_reduce");
    if (mode == "exit") {
      std::fprintf(stderr, "dist_faults: rank 1 exits with 3 without finalize\n");
      std::fflush(stderr);
      std::_Exit(3);
    }
    std::this_thread::sleep_for(std::chrono::seconds(120));
    std::fprintf(stderr, "dist_faults: rank 1 was not stopped\n");
    return 0;
  }
  comm->all_reduce(t);
  std::fprintf(stderr, "dist_faults: rank 0's all_reduce finished, which it must not\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode != "timeout" && mode != "error" && mode != "exit" && mode != "mismatch") {
    std::fprintf(stderr, "usage: dist_faults timeout|error|exit|mismatch (under mpirun -np 2)\n");
    return 2;
  }
  try {
    run(mode);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_faults: %s\n", e.what());
    dark::dist::abort_job(1);
  }
  // Never a success: each mode ends in an abort.
  dark::dist::finalize();
  return 4;
}
