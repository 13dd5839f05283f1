// The nccl backend: CUDA tensors over NCCL (built with DARK_WITH_NCCL only).
//
// Bootstrap: under mpirun, rank 0 makes the ncclUniqueId and broadcasts it over
// MPI_COMM_WORLD, and each rank takes cuda:local_rank; without mpirun, a world of one on the
// given device, its id made locally (no MPI at all).
//
// Streams: darkformer's kernels run on the legacy default stream (core/cuda/launch.cuh).
// Collectives run on the communicator's own non-blocking stream: each one first waits
// (cudaStreamWaitEvent) for what the default stream had queued when it was issued, and
// records an event when it ends. Work::wait polls that event on the host until the result
// is ready, checking ncclCommGetAsyncError as it goes (an error aborts the NCCL communicator
// and throws); past timeout_s it prints the timeout line, aborts the NCCL communicator
// (ncclCommAbort: ncclCommDestroy could block on the stuck collective) and ends the job
// (abort_job). A Work dropped unwaited makes the default stream wait for its event, so the
// memory of its tensors is not reused under the collective.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <functional>
#include <initializer_list>
#include <memory>

#include "train/dist/collective.h"
#include "train/dist/communicator.h"

namespace dark::dist {

class NcclCommunicator final : public Communicator {
 public:
  // A collective under mpirun: every rank constructs its communicators in the same order.
  NcclCommunicator(Device device, double timeout_s);
  // Waits for the last collective (within timeout_s); the NCCL communicator itself is
  // destroyed once no Work refers to it any more.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int local_rank() const override { return local_rank_; }
  BackendKind backend() const override { return BackendKind::nccl; }
  Device device() const override { return device_; }
  std::string describe() const override;

  Work all_reduce_async(const Tensor& t, ReduceOp op) override;
  Work reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) override;
  Work all_gather_async(const Tensor& in, const Tensor& out) override;
  Work broadcast_async(const Tensor& t, int root) override;
  void barrier() override;

  struct Shared;  // the NCCL communicator and its stream, shared with the Works in flight
  struct Job;

 private:
  // Issues call(comm, stream) on the NCCL stream after the work the default stream has
  // queued (skipped when the collective moves no element); the Work keeps `keep` alive.
  Work launch(const CollectiveInfo& info, std::initializer_list<Tensor> keep,
              const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& call);

  double timeout_s_;
  int rank_ = 0, world_ = 1, local_rank_ = 0;
  Device device_;
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<Job> last_;  // the latest collective, which the destructor waits for
  Tensor barrier_flag_;        // one i32 on the device: barrier() all-reduces it
};

}  // namespace dark::dist
