// A data-parallel training step on a GPU, against the same step on the CPU without
// communication: gradient buckets all-reduced during backward, the gradient norm, an SGD
// update, and ZeRO stage 1's reduce-scatter / all-gather. The model is one linear layer, so
// the step needs only the basic ops that have CUDA kernels (the model's fused ops do not yet).
//   - the single backend on the GPU (a world of one): the bucket and ZeRO-1 paths on device
//     memory;
//   - a world of two ranks in one process (ThreadWorld below: one thread per rank, collectives
//     staged through the host): real shards (a parameter straddles the shard boundary), two
//     buckets, each rank with its own rows, against one process on the joint batch;
//   - the nccl backend (a world of one, no mpirun).
// The GPU tests skip (visibly) where no GPU can run kernels, and run on the CPU in
// test_data_parallel_gpu_emulated (the CUDA emulator), except nccl's: NCCL cannot use the
// emulator's device memory. The same steps on the CPU run everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/backend.h"
#include "nn/optim.h"
#include "nn/parameter_buffer.h"
#include "train/data_parallel.h"
#include "train/dist/collective.h"
#include "tests/test_util.h"

namespace dark::train {
namespace {

// ---------------------------------------------------------------- a world of threads

// A world of `size` ranks in one process, one thread per rank, so that DataParallel runs with
// more than one rank without mpirun and on any device, the CUDA emulator's included. Its
// collectives stage through the host (as the mpi backend moves CPU tensors) and reduce in
// float64 (exact for the sum of two float32 or bfloat16 values, as a GPU's own addition
// rounds it). Only one rank thread runs at a time (a rank runs until it waits in a
// collective), so a backend with one host thread's state, like the emulator, serves them all.
class ThreadWorld {
 public:
  ThreadWorld(int size, Device device) : size_(size), device_(device) {}

  // Runs fn(communicator) on every rank, each in a thread of its own; rethrows a rank's
  // failure (the other ranks then stop at their next collective).
  template <class Fn>
  void run(Fn fn) {
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size_));
    std::vector<std::thread> threads;
    for (int r = 0; r < size_; ++r)
      threads.emplace_back([&, r] {
        std::unique_lock<std::mutex> turn(mutex_);  // held while this rank runs
        try {
          Rank comm(*this, r, turn);
          fn(static_cast<dist::Communicator&>(comm));
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
          failed_ = true;
          changed_.notify_all();
        }
      });
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
  }

 private:
  class Rank final : public dist::Communicator {
   public:
    Rank(ThreadWorld& world, int rank, std::unique_lock<std::mutex>& turn) : world_(world), rank_(rank), turn_(turn) {}
    int rank() const override { return rank_; }
    int world_size() const override { return world_.size_; }
    int local_rank() const override { return rank_; }
    dist::BackendKind backend() const override { return dist::BackendKind::single; }  // as messages name it
    Device device() const override { return world_.device_; }
    std::string describe() const override { return str("thread rank ", rank_, " of ", world_.size_); }

    dist::Work all_reduce_async(const Tensor& t, dist::ReduceOp op) override {
      dist::check_all_reduce(t, device());
      put(t, reduce(exchange(t), op));
      return dist::Work();
    }
    dist::Work reduce_scatter_async(const Tensor& in, const Tensor& out, dist::ReduceOp op) override {
      dist::check_reduce_scatter(in, out, rank_, world_.size_, device());
      const std::vector<double> all = reduce(exchange(in), op);
      const auto n = static_cast<std::ptrdiff_t>(out.numel());
      put(out, std::vector<double>(all.begin() + rank_ * n, all.begin() + (rank_ + 1) * n));
      return dist::Work();
    }
    dist::Work all_gather_async(const Tensor& in, const Tensor& out) override {
      dist::check_all_gather(in, out, rank_, world_.size_, device());
      std::vector<double> all;
      for (const std::vector<double>& block : exchange(in)) all.insert(all.end(), block.begin(), block.end());
      put(out, all);
      return dist::Work();
    }
    dist::Work broadcast_async(const Tensor& t, int root) override {
      dist::check_broadcast(t, root, world_.size_, device());
      put(t, exchange(t)[static_cast<std::size_t>(root)]);
      return dist::Work();
    }
    void barrier() override { exchange(Tensor::zeros({0})); }

   private:
    // Every rank's values of its tensor in this collective, by rank.
    std::vector<std::vector<double>> exchange(const Tensor& t) {
      DARK_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64 || t.dtype() == DType::bf16,
                 "ThreadWorld moves float tensors only, not ", t.describe());
      return world_.exchange(rank_, sequence_++, t.to(Device::cpu()).to(DType::f64).to_vector<double>(), turn_);
    }
    static std::vector<double> reduce(const std::vector<std::vector<double>>& all, dist::ReduceOp op) {
      std::vector<double> out = all[0];
      for (std::size_t r = 1; r < all.size(); ++r)
        for (std::size_t i = 0; i < out.size(); ++i)
          out[i] = op == dist::ReduceOp::sum ? out[i] + all[r][i] : std::max(out[i], all[r][i]);
      return out;
    }
    static void put(const Tensor& t, const std::vector<double>& values) {
      core::reshape(t, {t.numel()}).copy_(Tensor::from_vector<double>(values, {t.numel()}).to(t.dtype()).to(t.device()));
    }

    ThreadWorld& world_;
    int rank_;
    std::unique_lock<std::mutex>& turn_;
    std::uint64_t sequence_ = 0;  // collectives this rank has issued
  };

  // Gives `mine` as this rank's part of its sequence-th collective and returns every rank's,
  // once all have given theirs; waiting lets the other ranks run.
  std::vector<std::vector<double>> exchange(int rank, std::uint64_t sequence, std::vector<double> mine,
                                            std::unique_lock<std::mutex>& turn) {
    Slot& slot = slots_[sequence];
    slot.given.resize(static_cast<std::size_t>(size_));
    slot.given[static_cast<std::size_t>(rank)] = std::move(mine);
    ++slot.arrived;
    changed_.notify_all();
    changed_.wait(turn, [&] { return failed_ || slot.arrived == size_; });
    if (failed_) throw Error(str("rank ", rank, ": another rank failed"));
    std::vector<std::vector<double>> all = slot.given;
    if (++slot.read == size_) slots_.erase(sequence);
    return all;
  }

  struct Slot {
    std::vector<std::vector<double>> given;
    int arrived = 0, read = 0;
  };
  const int size_;
  const Device device_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::uint64_t, Slot> slots_;
  bool failed_ = false;
};

// ---------------------------------------------------------------- the step

// loss = sum((x W + b)^2), x (rows, in) and W (in, out). x's row g is the same on every rank
// and device; a rank r of `rows` rows has rows [r * rows, (r + 1) * rows). Every value is a
// small multiple of 1/8, so the forward pass and the gradients are exact in float32 (any
// summation order); only the update (lr 0.1) rounds.
struct LinearProblem {
  std::int64_t rows = 5, in = 4, out = 3;
  double bucket_mb = 25;  // distributed.bucket_mb
};

// Bigger than one ZeRO-1 shard of a world of two (2 x ParameterBuffer::kNormChunk elements
// in all): W (6144 elements) straddles the boundary at 4096, b lies in shard 1; with buckets
// of 0.005 MB (1310 floats), b and the padding form one bucket and W the other.
LinearProblem sharded_problem() { return {3, 64, 96, 0.005}; }

struct StepOutcome {
  std::vector<float> weights;  // W then b, after the update
  double grad_sq = 0;
  std::size_t buckets = 0;  // DataParallel's gradient buckets (stage 0)
};

// One SGD step (momentum 0.9); `comm` null = no data parallelism (rank 0 of 1).
StepOutcome linear_step(Device device, dist::Communicator* comm, int zero_stage, const LinearProblem& p = {}) {
  const int rank = comm ? comm->rank() : 0;
  std::vector<float> x_values(p.rows * p.in), w_values(p.in * p.out), b_values(p.out);
  for (std::int64_t i = 0; i < p.rows * p.in; ++i)
    x_values[i] = 0.25f * static_cast<float>((rank * p.rows * p.in + i) % 7) - 0.5f;
  for (std::size_t i = 0; i < w_values.size(); ++i) w_values[i] = 0.125f * static_cast<float>(i % 5) - 0.25f;
  for (std::size_t i = 0; i < b_values.size(); ++i) b_values[i] = 0.5f - 0.25f * static_cast<float>(i % 4);
  const Tensor x = Tensor::from_vector<float>(x_values, {p.rows, p.in}).to(device);
  Tensor w = Tensor::from_vector<float>(w_values, {p.in, p.out}).to(device);
  Tensor b = Tensor::from_vector<float>(b_values, {p.out}).to(device);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  nn::ParameterBuffer params({{"w", &w}, {"b", &b}}, comm ? comm->world_size() : 1);
  DistributedConfig dc;
  dc.zero_stage = zero_stage;
  dc.bucket_mb = p.bucket_mb;
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
  if (parallel) out.buckets = parallel->num_buckets();
  if (parallel) {
    parallel->finish_gradients();
    out.grad_sq = parallel->grad_sq_norm().to(Device::cpu()).item();
  } else {
    out.grad_sq = params.grad_sq_norm().to(Device::cpu()).item();
  }
  optimizer.step(0.1);
  if (parallel) parallel->after_update();
  out.weights = w.detach().to(Device::cpu()).contiguous().to_vector<float>();
  const std::vector<float> b_after = b.detach().to(Device::cpu()).to_vector<float>();
  out.weights.insert(out.weights.end(), b_after.begin(), b_after.end());
  return out;
}

// got against want: the gradient norm to 1e-9 relative (exact sums of exact squares), the
// weights to 1e-6 of their largest magnitude (float32 rounding of the update, whatever order
// or contraction a device uses).
void expect_step_matches(const StepOutcome& got, const StepOutcome& want, const std::string& what) {
  EXPECT_GT(want.grad_sq, 0.0) << what;
  EXPECT_NEAR(got.grad_sq, want.grad_sq, 1e-9 * want.grad_sq) << what;
  ASSERT_EQ(got.weights.size(), want.weights.size()) << what;
  float scale = 0;
  for (float v : want.weights) scale = std::max(scale, std::fabs(v));
  int bad = 0;
  for (std::size_t i = 0; i < want.weights.size(); ++i)
    if (!(std::fabs(got.weights[i] - want.weights[i]) <= 1e-6 * scale) && bad++ < 5)
      ADD_FAILURE() << what << ": weight " << i << " is " << got.weights[i] << ", want " << want.weights[i];
  EXPECT_EQ(bad, 0) << what << ": weights differ";
}

// Two ranks in a ThreadWorld on `device`, each stepping on its own rows, against one process
// stepping on both ranks' rows on the CPU; both ranks end with the same bits.
void expect_two_ranks_match_the_joint_batch(Device device) {
  const LinearProblem p = sharded_problem();
  LinearProblem joint = p;
  joint.rows = 2 * p.rows;
  const StepOutcome want = linear_step(Device::cpu(), nullptr, 0, joint);
  for (int stage : {0, 1}) {
    ThreadWorld world(2, device);
    std::vector<StepOutcome> got(2);
    world.run([&](dist::Communicator& comm) {
      got[static_cast<std::size_t>(comm.rank())] = linear_step(device, &comm, stage, p);
    });
    for (int r = 0; r < 2; ++r)
      expect_step_matches(got[r], want, str(device.to_string(), ", ZeRO stage ", stage, ", rank ", r, " of 2"));
    EXPECT_EQ(got[1].weights, got[0].weights) << "ZeRO stage " << stage << ": the ranks differ";
    EXPECT_EQ(got[1].grad_sq, got[0].grad_sq) << "ZeRO stage " << stage;
    if (stage == 0) EXPECT_EQ(got[0].buckets, 2u) << "b with the padding, and W";
  }
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

// The world of threads itself, on the CPU (so it is checked where no GPU runs it).
TEST(DataParallelGpu, TwoThreadRanksOnTheCpuMatchOneProcessOnTheirJointBatch) {
  expect_two_ranks_match_the_joint_batch(Device::cpu());
}

TEST(DataParallelGpu, OneRankStepOnTheGpuThroughTheSingleBackendMatchesTheCpu) {
  DARK_REQUIRE_GPU();
  auto comm = dist::make_communicator(dist::BackendKind::single, Device::cuda(0), 60);
  for (const LinearProblem& p : {LinearProblem{}, sharded_problem()}) {
    const StepOutcome cpu = linear_step(Device::cpu(), nullptr, 0, p);
    for (int stage : {0, 1})
      expect_step_matches(linear_step(Device::cuda(0), comm.get(), stage, p), cpu,
                          str("single backend on cuda:0, ZeRO stage ", stage, ", ", p.in, " x ", p.out));
  }
}

TEST(DataParallelGpu, TwoRanksOnTheGpuMatchTheCpuOnTheirJointBatch) {
  DARK_REQUIRE_GPU();
  expect_two_ranks_match_the_joint_batch(Device::cuda(0));
}

TEST(DataParallelGpu, OneRankStepThroughNcclMatchesTheCpu) {
  DARK_REQUIRE_GPU();
#if defined(DARK_TEST_ON_CUDA_EMULATOR)
  GTEST_SKIP() << "NCCL needs a real GPU: it would be handed the CUDA emulator's device pointers (host memory)";
#elif !defined(DARK_WITH_NCCL)
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
