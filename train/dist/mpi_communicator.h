// The mpi backend: CPU tensors over MPI (built with DARK_WITH_MPI only).
//
// One communication thread per communicator owns every MPI call of its collectives and
// runs them from a FIFO queue in issue order: a non-blocking collective makes progress while
// the caller computes (Open MPI has no progress thread of its own), and the order every
// rank issued is the order every rank communicates in. The communicator works on its own
// duplicate of MPI_COMM_WORLD, so a program's own MPI calls on MPI_COMM_WORLD do not mix
// with its messages.
//
// Work::wait blocks until the job ran, with a deadline of timeout_s from the call (past it:
// one line naming the rank and the collective, then abort_job); an MPI error on the
// communication thread is rethrown by wait(). Buffers larger than one MPI call can count
// (int counts) are split into chunks of at most max_chunk_elements(): all_reduce and
// broadcast chunk by chunk, reduce_scatter and all_gather (whose blocks are then not
// contiguous per chunk) as one MPI_Reduce / MPI_Bcast per rank's block and chunk. bf16
// reduces with user-defined MPI_Ops (sum in float, rounded to nearest even; max) on 2-byte
// elements.
//
// Under MPI_THREAD_SERIALIZED (no MPI_THREAD_MULTIPLE) only one mpi communicator may live at
// a time, and the timeout exits the process instead of calling MPI_Abort (see abort_job).
#pragma once
#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "train/dist/collective.h"
#include "train/dist/communicator.h"

namespace dark::dist {

class MpiCommunicator final : public Communicator {
 public:
  // Initialises MPI if needed (a collective: every rank constructs its communicators in the
  // same order) and starts the communication thread.
  explicit MpiCommunicator(double timeout_s);
  // Waits for the queued collectives (each within timeout_s), then stops the thread.
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int local_rank() const override { return local_rank_; }
  BackendKind backend() const override { return BackendKind::mpi; }
  Device device() const override { return Device::cpu(); }
  std::string describe() const override;

  Work all_reduce_async(const Tensor& t, ReduceOp op) override;
  Work reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) override;
  Work all_gather_async(const Tensor& in, const Tensor& out) override;
  Work broadcast_async(const Tensor& t, int root) override;
  void barrier() override;

  // The most elements one MPI call is given (default: 1 GiB worth of the dtype, below int's
  // limit). Tests lower it to run the chunked paths on small tensors; every rank must set
  // the same value, before issuing.
  std::int64_t max_chunk_elements(DType dtype) const;
  void set_max_chunk_bytes(std::int64_t bytes);

 private:
  struct Job;
  struct Progress;
  // Queues `run` (the MPI calls, on the communication thread) and returns its Work.
  Work enqueue(const CollectiveInfo& info, std::function<void()> run);
  void thread_main();
  // Drains the queue (each job within the timeout), stops the thread, frees the MPI
  // communicator. Idempotent; the finalize hook calls it too.
  void shutdown();

  double timeout_s_;
  int rank_ = 0, world_ = 1, local_rank_ = 0;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::int64_t max_chunk_bytes_;
  int finalize_hook_ = -1;

  std::mutex mutex_;  // guards queue_ and stopping_
  std::condition_variable queue_changed_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::atomic<std::size_t> queued_{0};  // queue_.size(), for the thread to poll without the lock
  bool stopping_ = false;
  std::shared_ptr<Progress> progress_;  // what the thread is running, for the timeout message
  std::thread thread_;
};

}  // namespace dark::dist
