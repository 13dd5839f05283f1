// Collective communication between the ranks of a data-parallel run: one interface, three
// backends (see make_communicator). This folder depends on core/ only: it moves tensors'
// bytes between processes and knows nothing of models or training.
//
//   single  world size 1, no MPI at run time: every collective is the identity (a copy
//           where in and out differ).
//   mpi     CPU tensors over Open MPI. All MPI calls run on one communication thread, in the
//           order they were issued, so a non-blocking collective makes progress while the
//           caller computes (Open MPI has no progress thread of its own).
//   nccl    CUDA tensors over NCCL; the NCCL communicator is built from an ncclUniqueId that
//           rank 0 broadcasts over MPI, and each rank uses the GPU of its local rank.
//
// Rules every caller keeps (as with MPI and NCCL themselves): every rank issues the same
// collectives in the same order with the same sizes and dtypes; tensors are contiguous and
// on the communicator's device; a tensor handed to a non-blocking call is neither read nor
// written by the caller until its Work has been waited on.
//
// What every backend accepts:
//   dtypes   f32, f64, bf16, i32, i64, for every collective. bf16 reduces as float and
//            rounds to nearest even after each addition (core/bfloat16.h); max picks an
//            operand, and a NaN wins.
//   empty    a tensor of 0 elements is a legal no-op; it is still a collective (every rank
//            issues it, in its place in the order) and its Work completes in that order.
//   sizes    any element count that fits in memory (2^31 and beyond: the mpi backend splits
//            what does not fit MPI's int counts into chunks; NCCL counts are size_t).
//   in place reduce_scatter_async(in, out) with `out` the view of in's block `rank`
//            (in = flat buffer of W*n elements, out = its slice [rank*n, (rank+1)*n)), and
//            all_gather_async(in, out) with `in` the view of out's block `rank`, as NCCL
//            allows. In-place reduce_scatter leaves in's other blocks unspecified (the mpi
//            backend uses them as scratch). in and out may not otherwise overlap.
//   order    Works may be waited on in any order; collectives run in issue order, so
//            waiting on one that was issued later also completes the earlier ones' data
//            movement (their wait() still reports their own failures).
//
// Failures: every MPI and NCCL call is checked; a failure throws dark::Error naming the
// call, the rank and the library's error string. A collective that has not finished within
// the timeout (distributed.timeout_s, counted from the call to wait(); another rank died or
// hangs) ends this process with an error naming the rank, the collective and its size, and
// aborts the job (MPI_Abort), so no rank is left waiting.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "core/enum_names.h"
#include "core/tensor.h"

namespace dark::dist {

enum class ReduceOp { sum, max };
enum class BackendKind { automatic, single, mpi, nccl };

// A collective in flight. wait() blocks until it has finished (for nccl: until the result
// is ready for kernels on the tensor's device) and rethrows its failure; waiting again, or
// on a default-constructed Work, returns at once.
class Work {
 public:
  struct State;  // backend-defined
  Work() = default;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  void wait();
  bool done() const;  // true once wait() would not block
 private:
  std::shared_ptr<State> state_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual int local_rank() const = 0;     // rank among the processes of this host
  virtual BackendKind backend() const = 0;
  virtual Device device() const = 0;      // where its tensors must live (cpu, or cuda:local_rank)
  // One line for logs: "mpi rank 1 of 2 (local 1) on cpu, timeout 600 s, MPI_THREAD_MULTIPLE".
  virtual std::string describe() const = 0;

  // In place: every rank's t becomes the element-wise reduction over ranks.
  virtual Work all_reduce_async(const Tensor& t, ReduceOp op) = 0;
  // in: world_size * n elements; out: n elements; rank r gets the reduction of block r.
  virtual Work reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) = 0;
  // in: n elements; out: world_size * n elements, block r from rank r.
  virtual Work all_gather_async(const Tensor& in, const Tensor& out) = 0;
  // In place: every rank's t becomes root's.
  virtual Work broadcast_async(const Tensor& t, int root) = 0;
  virtual void barrier() = 0;

  // The blocking forms.
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) { all_reduce_async(t, op).wait(); }
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::sum) {
    reduce_scatter_async(in, out, op).wait();
  }
  void all_gather(const Tensor& in, const Tensor& out) { all_gather_async(in, out).wait(); }
  void broadcast(const Tensor& t, int root = 0) { broadcast_async(t, root).wait(); }
};

// True when this process was started by mpirun (or a scheduler through it), with any number
// of ranks. It reads the launcher's environment (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE),
// not MPI, so it is safe to call before MPI is initialised.
bool launched_by_mpi();
// This process's rank as the launcher's environment gives it (OMPI_COMM_WORLD_RANK,
// PMIX_RANK, PMI_RANK), or -1 when it gives none; for messages before MPI is up.
int launcher_rank();

// The communicator for a run whose tensors live on `device`:
//   automatic: nccl for a CUDA device under mpirun, mpi for the CPU under mpirun, single
//              otherwise (a plain process);
//   forced:    the named backend; an error says why when it cannot be used (not built in,
//              not launched by mpirun, a device it cannot serve).
// timeout_s bounds every wait (distributed.timeout_s): > 0, or infinity for no limit.
// Initialises MPI on first use (mpi, and nccl under mpirun).
// Devices: mpi serves the CPU only. nccl serves a CUDA device: under mpirun each rank takes
// cuda:local_rank (device()'s index; the index passed in is not used, so put the model on
// comm->device()); without mpirun nccl is a world of size 1 on `device` itself (its
// ncclUniqueId is made locally; no MPI at all), which is how the GPU tests run it.
std::unique_ptr<Communicator> make_communicator(BackendKind backend, Device device, double timeout_s);

// Process end. finalize(): the orderly exit after success (MPI_Finalize when MPI was
// initialised; nothing otherwise). It first drains and stops any mpi communicator still
// alive (they throw if used afterwards); call it once, at the end of main. abort_job():
// after an error on one rank, ends every rank of the job with a non-zero exit (MPI_Abort)
// instead of leaving the others waiting in a collective; a plain process just exits with
// `code` (std::exit). When MPI gives only MPI_THREAD_SERIALIZED and the communication
// thread is inside an MPI call, it cannot call MPI_Abort safely: it flushes and
// std::_Exit(code)s instead, and mpirun ends the other ranks of a job one of whose
// processes exited non-zero. Does not return.
void finalize();
[[noreturn]] void abort_job(int code);

}  // namespace dark::dist

namespace dark {
template <>
struct EnumNames<dist::BackendKind> {
  static constexpr std::array<std::pair<dist::BackendKind, std::string_view>, 4> table{
      {{dist::BackendKind::automatic, "auto"},
       {dist::BackendKind::single, "single"},
       {dist::BackendKind::mpi, "mpi"},
       {dist::BackendKind::nccl, "nccl"}}};
};
template <>
struct EnumNames<dist::ReduceOp> {
  static constexpr std::array<std::pair<dist::ReduceOp, std::string_view>, 2> table{
      {{dist::ReduceOp::sum, "sum"}, {dist::ReduceOp::max, "max"}}};
};
}  // namespace dark
