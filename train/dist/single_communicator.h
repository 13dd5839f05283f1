// The single backend: a world of one process (rank 0 of 1) on any device, with no MPI at
// all; the default for a plain process. Every collective is local and finished when it
// returns: all_reduce and broadcast leave the tensor as it is, reduce_scatter and
// all_gather copy in to out (nothing in place). Arguments are checked as on every backend.
#pragma once
#include "train/dist/communicator.h"

namespace dark::dist {

class SingleCommunicator final : public Communicator {
 public:
  explicit SingleCommunicator(Device device) : device_(device) {}
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_rank() const override { return 0; }
  BackendKind backend() const override { return BackendKind::single; }
  Device device() const override { return device_; }
  std::string describe() const override;

  Work all_reduce_async(const Tensor& t, ReduceOp op) override;
  Work reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) override;
  Work all_gather_async(const Tensor& in, const Tensor& out) override;
  Work broadcast_async(const Tensor& t, int root) override;
  void barrier() override {}

 private:
  Device device_;
};

}  // namespace dark::dist
