// Tensor metadata, views, conversions, printing, size checks, and the caching allocator.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/allocator.h"
#include "core/tensor.h"
#include "train/cli/mlp_demo.h"
#include "test_util.h"

namespace dark {
namespace {

using dark::testing::error_of;

std::vector<double> values(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }


TEST(Tensor, CreationAndMetadata) {
  const Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.strides(), (Strides{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.describe(), "f32[2, 3, 4] cpu");
  EXPECT_EQ(Tensor::full({2}, 2.5, DType::f64).to_vector<double>(), (std::vector<double>{2.5, 2.5}));
  EXPECT_EQ(Tensor::arange(4, DType::i64).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(Tensor::scalar(3.0).item(), 3.0);
  EXPECT_FALSE(Tensor().defined());
  EXPECT_THROW(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), Error);
  EXPECT_THROW(Tensor::zeros({2}).data<double>(), Error);
}

TEST(Tensor, ViewsShareStorageAndIndexCorrectly) {
  const Tensor t = core::reshape(Tensor::arange(24), {2, 3, 4});
  const Tensor p = core::permute(t, {2, 0, 1});  // [4, 2, 3]
  EXPECT_TRUE(p.shares_storage(t));
  EXPECT_FALSE(p.is_contiguous());
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  // p[i][j][k] = t[j][k][i] = 12 j + 4 k + i
  const auto pv = values(p);
  EXPECT_EQ(pv[1 * 6 + 1 * 3 + 2], 12 + 8 + 1);
  const Tensor s = core::slice(t, 2, 1, 4, 2);  // elements 1 and 3 of the last axis
  EXPECT_EQ(values(s), (std::vector<double>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23}));
  const Tensor neg = core::slice(t, 1, -1, 3);
  EXPECT_EQ(neg.shape(), (Shape{2, 1, 4}));
  const Tensor e = core::expand(Tensor::arange(3), {2, 3});
  EXPECT_EQ(e.strides(), (Strides{0, 1}));
  EXPECT_EQ(values(e), (std::vector<double>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(core::unsqueeze(Tensor::arange(3), 0).shape(), (Shape{1, 3}));
  EXPECT_EQ(core::squeeze(core::unsqueeze(Tensor::arange(3), 1), 1).shape(), (Shape{3}));
  EXPECT_EQ(core::reshape(t, {-1, 4}).shape(), (Shape{6, 4}));
  // reshape of a non-contiguous view copies into the right order
  EXPECT_EQ(values(core::reshape(core::transpose(core::reshape(Tensor::arange(6), {2, 3}), 0, 1), {6})),
            (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

TEST(Tensor, ErrorsNameTheShapes) {
  const Tensor t = Tensor::zeros({2, 3});
  try {
    core::reshape(t, {4, 2});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f32[2, 3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4, 2]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(core::expand(t, {3, 3}), Error);
  EXPECT_THROW(core::permute(t, {0, 0}), Error);
  EXPECT_THROW(core::squeeze(t, 0), Error);
  EXPECT_THROW(core::slice(t, 5, 0, 1), Error);
  EXPECT_THROW(Device::parse("gpu"), Error);
  EXPECT_EQ(Device::parse("cuda:3").index, 3);
}

TEST(Tensor, DtypeConversionsRoundCorrectly) {
  const Tensor x = Tensor::from_vector<double>({1.0, 1.00390625, 1.01171875, -2.5, 3.7}, {5});
  // bfloat16 keeps 8 significant bits and rounds to nearest even.
  EXPECT_EQ(values(x.to(DType::bf16)), (std::vector<double>{1.0, 1.0, 1.015625, -2.5, 3.703125}));
  EXPECT_EQ(x.to(DType::i32).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 1, 1, -2, 3}));
  EXPECT_EQ(values(x.to(DType::f32)), (std::vector<double>{1.0, 1.00390625, 1.01171875, -2.5, static_cast<float>(3.7)}));
}

TEST(Tensor, CopyAndPrinting) {
  Tensor dst = Tensor::zeros({2, 3});
  Tensor view = core::transpose(dst, 0, 1);  // write through a strided view
  view.copy_(core::reshape(Tensor::arange(6), {3, 2}));
  EXPECT_EQ(values(dst), (std::vector<double>{0, 2, 4, 1, 3, 5}));
  const std::string s = core::reshape(Tensor::arange(6), {2, 3}).to_string();
  EXPECT_NE(s.find("Tensor(f32[2, 3] cpu)"), std::string::npos) << s;
  EXPECT_NE(s.find("[[0, 1, 2],"), std::string::npos) << s;
  const std::string big = Tensor::arange(100).to_string();
  EXPECT_NE(big.find("..."), std::string::npos) << big;
}

TEST(Tensor, CopyRequiresMatchingDtypes) {
  Tensor dst = Tensor::zeros({2, 3});
  const Tensor src = Tensor::full({2, 3}, 1.5, DType::f64);
  EXPECT_EQ(error_of([&] { dst.copy_(src); }),
            "copy_: source f64[2, 3] into destination f32[2, 3]: dtypes differ; convert explicitly with .to(dtype)");
  EXPECT_EQ(values(dst), std::vector<double>(6, 0.0)) << "a refused copy wrote into the destination";
  dst.copy_(src.to(DType::f32));
  EXPECT_EQ(values(dst), std::vector<double>(6, 1.5));
  // Conversion itself still works, through to(dtype), also for non-contiguous sources.
  const Tensor t = core::transpose(core::reshape(Tensor::arange(6, DType::f64), {2, 3}), 0, 1);
  EXPECT_EQ(t.to(DType::i64).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 3, 1, 4, 2, 5}));
}

TEST(Tensor, SizesThatOverflowAreErrorsNamingTheShape) {
  const std::int64_t big = std::int64_t{1} << 40;
  std::string m = error_of([&] { Tensor::empty({big, big}); });
  EXPECT_NE(m.find("[1099511627776, 1099511627776]"), std::string::npos) << m;
  EXPECT_NE(m.find("element count overflows"), std::string::npos) << m;
  // 2^61 elements fit in int64, their 2^63 bytes do not.
  m = error_of([&] { Tensor::empty({std::int64_t{1} << 61}, DType::f32); });
  EXPECT_NE(m.find("f32[2305843009213693952]"), std::string::npos) << m;
  EXPECT_NE(m.find("byte count overflows"), std::string::npos) << m;
  m = error_of([&] { Tensor::zeros({std::int64_t{1} << 60}, DType::f64); });
  EXPECT_NE(m.find("f64[1152921504606846976]"), std::string::npos) << m;
  // numel and strides check on their own; a zero size does not hide the overflow of strides.
  EXPECT_NE(error_of([&] { numel({big, big, 2}); }).find("element count overflows"), std::string::npos);
  EXPECT_NE(error_of([&] { numel({2, -3}); }).find("shape [2, -3] has a negative size"), std::string::npos);
  EXPECT_NE(error_of([&] { contiguous_strides({2, big, big}); }).find("stride overflows"), std::string::npos);
  EXPECT_NE(error_of([&] { Tensor::empty({0, big, big}); }).find("[0, 1099511627776, 1099511627776]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { core::reshape(Tensor::zeros({4}), {big, big, -1}); }).find("overflows"),
            std::string::npos);
  // The largest sizes that fit are fine as metadata.
  EXPECT_EQ(numel({big, 1 << 22}), std::int64_t{1} << 62);
  EXPECT_EQ(contiguous_strides({big, 1 << 22, 1}), (Strides{std::int64_t{1} << 22, 1, 1}));
}

TEST(Tensor, FloatToIntegerCastsSaturateLikeRustAs) {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  constexpr auto i32_min = std::numeric_limits<std::int32_t>::min(), i32_max = std::numeric_limits<std::int32_t>::max();
  constexpr auto i64_min = std::numeric_limits<std::int64_t>::min(), i64_max = std::numeric_limits<std::int64_t>::max();
  const Tensor in32 = Tensor::from_vector<double>({nan, inf, -inf, 3e10, -3e10, 2.7, -2.7}, {7});
  // 2^34 is exact in bf16, f32 and f64.
  const Tensor in64 = Tensor::from_vector<double>({nan, inf, -inf, 3e19, -3e19, 17179869184.0, 2.7, -2.7}, {8});
  for (DType from : {DType::f32, DType::f64, DType::bf16}) {
    EXPECT_EQ(in32.to(from).to(DType::i32).to_vector<std::int32_t>(),
              (std::vector<std::int32_t>{0, i32_max, i32_min, i32_max, i32_min, 2, -2}))
        << dtype_name(from);
    EXPECT_EQ(in64.to(from).to(DType::i64).to_vector<std::int64_t>(),
              (std::vector<std::int64_t>{0, i64_max, i64_min, i64_max, i64_min, std::int64_t{1} << 34, 2, -2}))
        << dtype_name(from);
  }
  // The edges of i32, from f64: truncation toward zero decides.
  const Tensor edges = Tensor::from_vector<double>({-2147483648.0, -2147483648.9, -2147483649.0, 2147483647.9, 2147483648.0}, {5});
  EXPECT_EQ(edges.to(DType::i32).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{i32_min, i32_min, i32_min, i32_max, i32_max}));
  // fill converts its double value the same way.
  EXPECT_EQ(Tensor::full({2}, nan, DType::i32).to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 0}));
  EXPECT_EQ(Tensor::full({1}, -1e300, DType::i64).to_vector<std::int64_t>(), (std::vector<std::int64_t>{i64_min}));
}

TEST(Allocator, ReusesFreedBlocks) {
  CachingAllocator& a = allocator_for(Device::cpu());
  { Tensor warm = Tensor::empty({1000, 37}); }
  const auto before = a.stats();
  for (int i = 0; i < 100; ++i) Tensor t = Tensor::empty({1000, 37});
  EXPECT_EQ(a.stats().system_allocs, before.system_allocs);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(3u << 20), 3u << 20);
  EXPECT_GE(CachingAllocator::round_size((3u << 20) + 1), (3u << 20) + 1);
}

// Graph pools (CachingAllocator::begin_pool): what a capture allocates or releases is the
// pool's until release_pool, whatever the common cache held before.
namespace pool_test {
int system_allocs = 0;
void* raw_allocate(std::size_t bytes, int) { return ++system_allocs, std::malloc(bytes); }
void raw_release(void* p, int) { std::free(p); }
}  // namespace pool_test

TEST(Allocator, AGraphPoolKeepsItsBlocksFromEveryoneElseUntilReleased) {
  CachingAllocator a({&pool_test::raw_allocate, &pool_test::raw_release}, DeviceType::cpu, 0);
  void* before = a.allocate(4096);  // eager, live across the capture
  void* cached = a.allocate(4096);
  a.release(cached, 4096);  // in the common cache
  const int pool = a.begin_pool();
  void* taken = a.allocate(4096);
  EXPECT_EQ(taken, cached) << "a capture takes the common cache's blocks first (and they join its pool)";
  void* fresh = a.allocate(4096);
  a.release(taken, 4096);
  a.release(before, 4096);  // an eager block released during the capture: the graph may have used it
  a.end_pool();
  EXPECT_EQ(a.pool_bytes(pool), 3 * CachingAllocator::round_size(4096));
  const int allocs = pool_test::system_allocs;
  void* after = a.allocate(4096);
  EXPECT_NE(after, taken);
  EXPECT_NE(after, before);
  EXPECT_NE(after, fresh);
  EXPECT_EQ(pool_test::system_allocs, allocs + 1) << "the pool's free blocks are not handed out";
  a.release(fresh, 4096);  // the pool's block, released after the capture, stays the pool's
  a.release(after, 4096);
  void* again = a.allocate(4096);
  EXPECT_EQ(again, after);
  a.release(again, 4096);
  a.release_pool(pool);
  EXPECT_EQ(a.pool_bytes(pool), 0u);
  std::vector<void*> reused;
  for (int i = 0; i < 4; ++i) reused.push_back(a.allocate(4096));
  EXPECT_EQ(pool_test::system_allocs, allocs + 1) << "released with the pool, its blocks serve everyone";
  for (void* p : reused) a.release(p, 4096);
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_cached, 4 * CachingAllocator::round_size(4096));
}

TEST(Allocator, TrainingLoopMakesNoSystemAllocationsAfterWarmup) {
  CachingAllocator& a = allocator_for(Device::cpu());
  cli::MlpDemoConfig config;
  config.steps = 5;
  cli::run_mlp_demo(config);  // warm-up: fills the cache with every size the loop uses
  const auto before = a.stats();
  config.steps = 50;
  cli::run_mlp_demo(config);
  const auto after = a.stats();
  EXPECT_GT(after.requests - before.requests, 1000u);
  EXPECT_EQ(after.system_allocs, before.system_allocs) << "a training step reached the system allocator";
}

}  // namespace
}  // namespace dark
