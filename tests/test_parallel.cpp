// Errors inside OpenMP parallel regions: a dark::Error thrown by a worker thread must reach
// the caller unchanged (before RegionErrors it escaped the region and ended the process in
// std::terminate). Every test runs with two OpenMP threads, so the regions really are
// parallel even on a one-core machine.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cpu/parallel.h"
#include "core/kernels.h"
#include "core/tensor.h"
#include "test_util.h"

namespace dark {
namespace {

using dark::testing::error_of;

// Sets the OpenMP thread count for one test and restores it afterwards.
class OmpThreads {
 public:
  explicit OmpThreads(int threads) : saved_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~OmpThreads() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

constexpr std::int64_t kWork = 4 * cpu::kGrainCheap;  // enough for two chunks on two threads


TEST(ParallelFor, ErrorOnAWorkerThreadReachesTheCaller) {
  OmpThreads two(2);
  std::atomic<int> team_size{0};
  const std::string m = error_of([&] {
    cpu::parallel_for(kWork, cpu::kGrainCheap, [&](std::int64_t begin, std::int64_t end) {
      if (omp_in_parallel()) team_size = omp_get_num_threads();
      DARK_CHECK(begin == 0, "chunk [", begin, ", ", end, ") failed");
    });
  });
  EXPECT_EQ(team_size.load(), 2) << "the region did not run on two threads";
  EXPECT_EQ(m, "chunk [65536, 131072) failed");
}

TEST(ParallelFor, TheLowestFailingChunkWinsWhateverTheTiming) {
  OmpThreads two(2);
  for (int round = 0; round < 20; ++round) {
    const std::string m = error_of([&] {
      cpu::parallel_for(kWork, cpu::kGrainCheap, [&](std::int64_t begin, std::int64_t) {
        throw Error(str("chunk at ", begin));
      });
    });
    ASSERT_EQ(m, "chunk at 0") << "round " << round;
  }
  // The next region runs normally.
  std::atomic<std::int64_t> covered{0};
  cpu::parallel_for(kWork, cpu::kGrainCheap, [&](std::int64_t begin, std::int64_t end) { covered += end - begin; });
  EXPECT_EQ(covered.load(), kWork);
}

TEST(ParallelFor, NonDarkExceptionsKeepTheirType) {
  OmpThreads two(2);
  EXPECT_THROW(cpu::parallel_for(kWork, cpu::kGrainCheap,
                                 [](std::int64_t begin, std::int64_t) {
                                   if (begin > 0) throw std::out_of_range("worker");
                                 }),
               std::out_of_range);
}

// The real check in core/cpu/matmul.cpp: many small products run one per thread inside
// parallel_for, and a failing dnnl_sgemm throws there. Autograd's matmul always passes
// valid leading dimensions, so the bad one (lda < k) goes straight to the kernel table.
TEST(ParallelFor, MatmulErrorInsideTheBatchLoopReachesTheCaller) {
  OmpThreads two(2);
  const Tensor a = Tensor::ones({4, 3, 5}), b = Tensor::ones({4, 5, 2});
  Tensor out = Tensor::zeros({4, 3, 2});
  GemmShape s;
  s.batch = 4, s.m = 3, s.n = 2, s.k = 5;
  s.lda = 5, s.ldb = 2, s.ldc = 2;
  s.batch_stride_a = 15, s.batch_stride_b = 10, s.batch_stride_c = 6;
  kernels::matmul().get(DeviceType::cpu, DType::f32)(a, b, out, s);  // valid: every entry is 5
  EXPECT_EQ(out.to_vector<float>(), std::vector<float>(24, 5.0f));
  s.lda = 1;  // rows of A overlap: oneDNN rejects it
  const std::string m = error_of([&] { kernels::matmul().get(DeviceType::cpu, DType::f32)(a, b, out, s); });
  EXPECT_NE(m.find("matmul: dnnl_sgemm failed"), std::string::npos) << m;
  EXPECT_NE(m.find("m=3 n=2 k=5"), std::string::npos) << m;
}

}  // namespace
}  // namespace dark
