// Data parallelism: what a training step does with its gradients when the run has more than
// one rank (every rank holds the whole model and trains on its own micro-batches).
//
// Gradients (stage 0). The flat gradient buffer is cut into buckets of about
// distributed.bucket_mb, in the reverse of the buffer's order, which is the order in which
// backward finishes the parameters (the LM head first, the embedding last). During the
// backward() of a step's last micro-batch, a bucket's all-reduce starts (non-blocking) as
// soon as the last of its parameters has its final gradient, while backward goes on with
// the layers below; finish_gradients() waits for the rest. Earlier micro-batches of the step
// only accumulate locally, and frozen parameters are not in the buffer, so they cost
// nothing. Each rank scales its loss by 1 / (grad_accum x world size), so the all-reduced
// sum is the mean gradient of the global batch.
//
// ZeRO stage 1. The optimizer state is sharded: rank r keeps and updates the slice
// params.shard(r) of the flat buffers. finish_gradients() reduce-scatters the gradients
// (each rank receives the summed gradients of its slice), the gradient norm is put together
// from per-rank chunk sums in a fixed order (bit for bit the stage-0 value), and after the
// update after_update() all-gathers the parameters.
//
// What must be the same on every rank is made the same by construction (the initial
// weights, random features and calibration are functions of the seed and of global batches)
// and checked: check_same_on_every_rank compares hashes of named tensors across ranks.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/parameter_buffer.h"
#include "train/config.h"
#include "train/dist/communicator.h"

namespace dark::train {

class DataParallel {
 public:
  // params: built with `shards` = comm.world_size() (the ZeRO-1 slices and the padding that
  // makes the buffer divisible among the ranks). Adds gradient-ready hooks to its parameters.
  DataParallel(dist::Communicator& comm, nn::ParameterBuffer& params, const DistributedConfig& config);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  dist::Communicator& comm() const { return comm_; }
  int rank() const;
  int world_size() const;
  int zero_stage() const { return zero_stage_; }
  std::size_t num_buckets() const;
  // The slice of the flat buffers this rank's optimizer keeps: its shard with ZeRO-1, the
  // whole buffer otherwise.
  nn::FlatRange optimizer_shard() const;

  // Call before the backward() of the step's last micro-batch: from then on, a bucket's
  // all-reduce starts as soon as backward has finished its parameters (stage 0).
  void arm();
  // After the last backward: completes the reduction of the step's gradients and returns
  // the seconds this rank waited for it (communication not hidden behind backward).
  double finish_gradients();
  // The global sum of squared gradients, a one-element float64 tensor on the gradients'
  // device, once finish_gradients() has run.
  Tensor grad_sq_norm() const;
  // After the optimizer's update: ZeRO-1 all-gathers the updated parameter slices.
  void after_update();

  // Sums a small tensor over the ranks, in place (the step's loss).
  void sum(const Tensor& t) const;
  // A shard-sized flat optimizer buffer -> the whole flat buffer (an all-gather): what
  // nn::Optimizer::state needs to write a full checkpoint under ZeRO-1.
  Tensor gather_shard(const Tensor& shard_values) const;

 private:
  struct Buckets;
  dist::Communicator& comm_;
  nn::ParameterBuffer& params_;
  int zero_stage_ = 0;
  std::shared_ptr<Buckets> buckets_;  // shared with the gradient-ready hooks
};

// The index of a micro-batch in the run's one global order of batches: step s of a run
// with world size W and grad_accum G reads batches [s*W*G, (s+1)*W*G), rank r the G from
// s*W*G + r*G. So W ranks see exactly the batches, in the same micro-batches, of one
// process with grad_accum W*G (and its dropout masks, which are keyed by this index).
std::int64_t micro_batch_index(std::int64_t step, int rank, int world_size, int grad_accum, int micro);

// Every rank passes the same names in the same order; compares a hash of each tensor's
// bytes across the ranks and throws, on every rank, an error naming `what` and the first
// tensor that differs, with the ranks that disagree with rank 0.
void check_same_on_every_rank(dist::Communicator& comm, const std::vector<std::pair<std::string, Tensor>>& tensors,
                              const std::string& what);

}  // namespace dark::train
