// A data-parallel training step on one GPU through the nccl backend (a world of one, no
// mpirun): gradient buckets all-reduced during backward, the gradient norm, an SGD update,
// and ZeRO stage 1's reduce-scatter / all-gather, against the same step on the CPU without
// communication. The model is one linear layer, so the step needs only the basic ops that
// have CUDA kernels (the model's fused ops do not yet). The GPU test skips where no GPU can
// run kernels; the same step through the single backend runs everywhere.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/backend.h"
#include "nn/optim.h"
#include "nn/parameter_buffer.h"
#include "train/data_parallel.h"
#include "tests/test_util.h"

namespace dark::train {
namespace {

struct StepOutcome {
  std::vector<float> weights;  // the flat parameter buffer after the update
  double grad_sq = 0;
};

// One SGD step of loss = sum((x W + b)^2) with fixed x, W, b; `comm` null = no data parallelism.
StepOutcome linear_step(Device device, dist::Communicator* comm, int zero_stage) {
  std::vector<float> x_values(5 * 4), w_values(4 * 3), b_values(3);
  for (std::size_t i = 0; i < x_values.size(); ++i) x_values[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  for (std::size_t i = 0; i < w_values.size(); ++i) w_values[i] = 0.125f * static_cast<float>(i % 5) - 0.25f;
  for (std::size_t i = 0; i < b_values.size(); ++i) b_values[i] = 0.5f - 0.25f * static_cast<float>(i);
  const Tensor x = Tensor::from_vector<float>(x_values, {5, 4}).to(device);
  Tensor w = Tensor::from_vector<float>(w_values, {4, 3}).to(device);
  Tensor b = Tensor::from_vector<float>(b_values, {3}).to(device);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  nn::ParameterBuffer params({{"w", &w}, {"b", &b}}, comm ? comm->world_size() : 1);
  DistributedConfig dc;
  dc.zero_stage = zero_stage;
  std::unique_ptr<DataParallel> parallel;
  if (comm) parallel = std::make_unique<DataParallel>(*comm, params, dc);
  nn::OptimizerConfig oc;
  oc.name = nn::OptimizerKind::sgd;
  oc.momentum = 0.9;
  oc.weight_decay = 0.0;
  nn::Optimizer optimizer(params, oc, parallel ? parallel->optimizer_shard() : nn::FlatRange{});

  params.zero_grad();
  if (parallel) parallel->arm();
  backward(sum(square(add(matmul(x, w), b))));
  StepOutcome out;
  if (parallel) {
    parallel->finish_gradients();
    out.grad_sq = parallel->grad_sq_norm().to(Device::cpu()).item();
  } else {
    out.grad_sq = params.grad_sq_norm().to(Device::cpu()).item();
  }
  optimizer.step(0.1);
  if (parallel) parallel->after_update();
  out.weights = params.values().to(Device::cpu()).to_vector<float>();
  return out;
}

// The same step through DataParallel with the single backend on the CPU: the bucket and
// ZeRO-1 paths with a world of one leave every bit as it is (and check linear_step itself).
TEST(DataParallelGpu, OneRankStepThroughTheSingleBackendChangesNothing) {
  const StepOutcome plain = linear_step(Device::cpu(), nullptr, 0);
  auto comm = dist::make_communicator(dist::BackendKind::single, Device::cpu(), 60);
  for (int stage : {0, 1}) {
    const StepOutcome through = linear_step(Device::cpu(), comm.get(), stage);
    EXPECT_EQ(through.grad_sq, plain.grad_sq) << "ZeRO stage " << stage;
    EXPECT_EQ(through.weights, plain.weights) << "ZeRO stage " << stage;
  }
  EXPECT_GT(plain.grad_sq, 0.0);
}

TEST(DataParallelGpu, OneRankStepThroughNcclMatchesTheCpu) {
  DARK_REQUIRE_GPU();
#ifndef DARK_WITH_NCCL
  GTEST_SKIP() << "built without NCCL (DARK_USE_NCCL=OFF)";
#else
  if (dist::launched_by_mpi()) GTEST_SKIP() << "run as a plain process: under mpirun the nccl world has more ranks";
  const StepOutcome cpu = linear_step(Device::cpu(), nullptr, 0);
  auto comm = dist::make_communicator(dist::BackendKind::nccl, Device::cuda(0), 60);
  for (int stage : {0, 1}) {
    const StepOutcome gpu = linear_step(Device::cuda(0), comm.get(), stage);
    EXPECT_NEAR(gpu.grad_sq, cpu.grad_sq, 1e-9 * cpu.grad_sq) << "ZeRO stage " << stage;
    ASSERT_EQ(gpu.weights.size(), cpu.weights.size());
    for (std::size_t i = 0; i < cpu.weights.size(); ++i)
      EXPECT_NEAR(gpu.weights[i], cpu.weights[i], 1e-5) << "element " << i << ", ZeRO stage " << stage;
  }
#endif
}

}  // namespace
}  // namespace dark::train
