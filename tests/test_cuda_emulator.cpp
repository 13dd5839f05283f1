// The CUDA emulator itself (tests/cuda_emulator/): the scheduling guarantees CUDA gives
// (block barriers, warp shuffles and votes with their masks), the faults it turns into
// errors instead of hangs or wrong answers (deadlocks, masks naming absent or exited lanes,
// launch shapes a GPU refuses), the tensor-core tile product against a plain product in the
// PTX fragment layout, ldmatrix and cp.async (layout, zero fill, addresses outside shared
// memory), Hopper's warpgroup products (layouts, descriptors, completion at the wait), and
// device memory that host code cannot touch. Driven through the emulator's own API (grid.h,
// wgmma.h), with kernels written as lambdas run per emulated thread.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/bfloat16.h"
#include "cuda_emulator/control.h"
#include "cuda_emulator/grid.h"
#include "cuda_emulator/wgmma.h"
#include "core/tensor.h"
#include "test_util.h"

namespace dark::cuda_emu {
namespace {

using dark::testing::error_of;

const int kKernelId = 0;  // any address identifies a "kernel" for the shared-memory attribute
const void* const kKernel = &kKernelId;

LaunchStatus run(Dim3 grid, Dim3 block, const std::function<void()>& body, std::size_t shared = 0) {
  return run_grid(kKernel, grid, block, shared, body);
}

template <class T>
T shuffle(unsigned mask, T v, int source) {
  T out;
  warp_exchange(mask, &v, &out, sizeof(T), source);
  return out;
}

TEST(CudaEmulator, BlockBarrierOrdersWritesBeforeReadsAcrossWarps) {
  const int n = 96;  // three warps
  std::vector<int> shared(n), seen(n);
  ASSERT_EQ(run({2, 1, 1}, {n, 1, 1}, [&] {
              const int t = current().linear;
              shared[t] = t * 10 + static_cast<int>(current().block_idx.x);
              sync_threads();
              seen[t] = shared[(t + 37) % n];  // another warp's value, written before the barrier
              sync_threads();
            }),
            LaunchStatus::ok);
  for (int t = 0; t < n; ++t) EXPECT_EQ(seen[t], ((t + 37) % n) * 10 + 1) << t;  // block 1 ran last
}

TEST(CudaEmulator, ExitedThreadsCountAsArrivedAtTheBlockBarrier) {
  int after = 0;
  ASSERT_EQ(run({1, 1, 1}, {64, 1, 1}, [&] {
              if (current().linear >= 40) return;  // exits before the barrier, as on a GPU
              sync_threads();
              ++after;
            }),
            LaunchStatus::ok);
  EXPECT_EQ(after, 40);
}

TEST(CudaEmulator, AWarpReductionWithShufflesSumsEveryLane) {
  std::vector<int> result(64);
  ASSERT_EQ(run({1, 1, 1}, {64, 1, 1}, [&] {
              const ThreadContext& c = current();
              int v = c.linear;
              for (int delta = 16; delta > 0; delta >>= 1) v += shuffle(0xffffffffu, v, c.lane + delta < 32 ? c.lane + delta : c.lane);
              result[c.linear] = shuffle(0xffffffffu, v, 0);
            }),
            LaunchStatus::ok);
  for (int t = 0; t < 32; ++t) EXPECT_EQ(result[t], 31 * 32 / 2);
  for (int t = 32; t < 64; ++t) EXPECT_EQ(result[t], (32 + 63) * 32 / 2);
}

TEST(CudaEmulator, DisjointHalfWarpsShuffleIndependently) {
  std::vector<int> result(32);
  ASSERT_EQ(run({1, 1, 1}, {32, 1, 1}, [&] {
              const int lane = current().lane;
              const unsigned mask = lane < 16 ? 0x0000ffffu : 0xffff0000u;
              result[lane] = shuffle(mask, lane * 3, lane < 16 ? 15 - lane : 47 - lane);
            }),
            LaunchStatus::ok);
  for (int l = 0; l < 32; ++l) EXPECT_EQ(result[l], (l < 16 ? 15 - l : 47 - l) * 3);
}

TEST(CudaEmulator, BallotCollectsThePredicatesOfTheMask) {
  unsigned ballot = 0;
  ASSERT_EQ(run({1, 1, 1}, {32, 1, 1}, [&] {
              const unsigned b = warp_ballot(0xffffffffu, current().lane % 3 == 0);
              if (current().lane == 0) ballot = b;
            }),
            LaunchStatus::ok);
  unsigned want = 0;
  for (int l = 0; l < 32; l += 3) want |= 1u << l;
  EXPECT_EQ(ballot, want);
}

TEST(CudaEmulator, ABarrierSomeThreadsSkipIsADeadlockError) {
  const std::string e = error_of([&] {
    run({1, 1, 1}, {64, 1, 1}, [&] {
      if (current().warp == 0) {
        sync_threads();
      } else {
        sync_warp(0xffffffffu);
        sync_threads();
        sync_threads();  // one barrier more than warp 0 reaches: warp 0 has exited, so this is
      }                  // fine; the deadlock is below
    });
  });
  EXPECT_EQ(e, "");  // exited threads count as arrived
  const std::string dead = error_of([&] {
    run({1, 1, 1}, {32, 1, 1}, [&] {
      if (current().lane < 16) sync_warp(0xffffffffu);  // lanes 16..31 exit instead of coming
    });
  });
  EXPECT_NE(dead.find("exited while lanes 0xffff wait"), std::string::npos) << dead;
  const std::string stuck = error_of([&] {
    run({1, 1, 1}, {64, 1, 1}, [&] {
      if (current().warp == 0) sync_threads();
      else if (current().lane < 16) sync_warp(0xffffffffu);  // waits for lanes parked at the block barrier
      else sync_threads();
    });
  });
  EXPECT_NE(stuck.find("deadlock"), std::string::npos) << stuck;
}

TEST(CudaEmulator, WarpMasksThatNameMissingLanesOrMissTheCallerAreErrors) {
  EXPECT_NE(error_of([&] { run({1, 1, 1}, {48, 1, 1}, [&] { sync_warp(0xffffffffu); }); }).find("does not have"),
            std::string::npos);  // warp 1 has lanes 0..15 only
  EXPECT_NE(error_of([&] { run({1, 1, 1}, {32, 1, 1}, [&] { sync_warp(current().lane == 3 ? 1u : 0xffffffffu); }); })
                .find("does not include the calling lane"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run({1, 1, 1}, {32, 1, 1}, [&] { (void)shuffle(0x0000ffffu, 1, current().lane < 16 ? 20 : 0); });
            }).find("which does not include it"),
            std::string::npos);
}

TEST(CudaEmulator, LaunchShapesAGpuRefusesAreRefused) {
  const auto nothing = [] {};
  EXPECT_EQ(run({1, 1, 1}, {1025, 1, 1}, nothing), LaunchStatus::invalid_configuration);
  EXPECT_EQ(run({0, 1, 1}, {32, 1, 1}, nothing), LaunchStatus::invalid_configuration);
  EXPECT_EQ(run({1, 70000, 1}, {32, 1, 1}, nothing), LaunchStatus::invalid_configuration);
  EXPECT_EQ(run({1, 1, 1}, {32, 1, 1}, nothing, 64 * 1024), LaunchStatus::invalid_value);  // > 48 KiB without opting in
  ASSERT_EQ(set_max_dynamic_shared(kKernel, 100 * 1024), LaunchStatus::ok);
  std::size_t filled = 0;
  EXPECT_EQ(run({1, 1, 1}, {32, 1, 1},
                [&] {
                  const auto* p = static_cast<const unsigned char*>(dynamic_shared_memory());
                  if (current().linear == 0) filled = static_cast<std::size_t>(std::count(p, p + 64 * 1024, 0xff));
                },
                64 * 1024),
            LaunchStatus::ok);
  EXPECT_EQ(filled, std::size_t{64 * 1024});  // poisoned: reading before writing gives NaN
  EXPECT_EQ(set_max_dynamic_shared(kKernel, 300 * 1024), LaunchStatus::invalid_value);
  ASSERT_EQ(set_max_dynamic_shared(kKernel, kDefaultSharedLimit), LaunchStatus::ok);
}

// The product of one m16n8k16 tile through mma_m16n8k16_bf16, each lane holding its
// fragments as the PTX ISA lays them out, against the plain product.
TEST(CudaEmulator, TensorCoreTileProductFollowsThePtxFragmentLayout) {
  float a[16][16], b[16][8], c[16][8];
  for (int i = 0; i < 16; ++i)
    for (int k = 0; k < 16; ++k) a[i][k] = static_cast<float>(BFloat16(0.25f * ((i * 7 + k * 3) % 11) - 1.0f));
  for (int k = 0; k < 16; ++k)
    for (int j = 0; j < 8; ++j) b[k][j] = static_cast<float>(BFloat16(0.5f * ((k * 5 + j) % 7) - 1.5f));
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) c[i][j] = static_cast<float>(i - j);
  float d[16][8] = {};
  auto pack = [](float lo, float hi) {
    return static_cast<std::uint32_t>(BFloat16(lo).bits) | (static_cast<std::uint32_t>(BFloat16(hi).bits) << 16);
  };
  ASSERT_EQ(run({1, 1, 1}, {32, 1, 1}, [&] {
              const int lane = current().lane, g = lane >> 2, t = lane & 3;
              const std::uint32_t fa[4] = {pack(a[g][2 * t], a[g][2 * t + 1]), pack(a[g + 8][2 * t], a[g + 8][2 * t + 1]),
                                           pack(a[g][2 * t + 8], a[g][2 * t + 9]),
                                           pack(a[g + 8][2 * t + 8], a[g + 8][2 * t + 9])};
              const std::uint32_t fb[2] = {pack(b[2 * t][g], b[2 * t + 1][g]), pack(b[2 * t + 8][g], b[2 * t + 9][g])};
              const float fc[4] = {c[g][2 * t], c[g][2 * t + 1], c[g + 8][2 * t], c[g + 8][2 * t + 1]};
              float fd[4];
              mma_m16n8k16_bf16(fd, fa, fb, fc);
              d[g][2 * t] = fd[0], d[g][2 * t + 1] = fd[1], d[g + 8][2 * t] = fd[2], d[g + 8][2 * t + 1] = fd[3];
            }),
            LaunchStatus::ok);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      double want = c[i][j];
      for (int k = 0; k < 16; ++k) want += static_cast<double>(a[i][k]) * b[k][j];
      EXPECT_NEAR(d[i][j], want, 1e-5) << i << ", " << j;
    }
}

// ldmatrix.x4: four 8 x 8 matrices of 16-bit elements in dynamic shared memory, rows at a
// padded stride, lanes 8i .. 8i + 7 naming matrix i's rows; each lane's registers against the
// PTX layout (row lane / 4, columns 2 (lane % 4) and the next; transposed: the column and rows).
TEST(CudaEmulator, LdmatrixGivesEachLaneThePtxLayout) {
  constexpr int kLd = 40;  // elements per row: 80 bytes, rows stay 16-byte aligned
  auto value = [](int matrix, int row, int col) { return static_cast<std::uint16_t>(matrix * 1000 + row * 10 + col); };
  for (const bool transposed : {false, true}) {
    std::uint32_t got[32][4] = {};
    ASSERT_EQ(run({1, 1, 1}, {32, 1, 1},
                  [&] {
                    auto* shared = static_cast<std::uint16_t*>(dynamic_shared_memory());
                    const int lane = current().lane;
                    // matrix i sits at columns 8 i .. 8 i + 7 of rows 0 .. 7
                    for (int i = 0; i < 4; ++i)
                      for (int c = 0; c < 8; ++c) shared[lane % 8 * kLd + 8 * i + c] = value(i, lane % 8, c);
                    sync_warp(0xffffffffu);
                    ldmatrix_x4(got[lane], shared + lane % 8 * kLd + 8 * (lane / 8), transposed);
                  },
                  8 * kLd * 2),
              LaunchStatus::ok);
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) {
        const int major = lane / 4, minor = 2 * (lane % 4);
        const std::uint32_t lo = transposed ? value(i, minor, major) : value(i, major, minor);
        const std::uint32_t hi = transposed ? value(i, minor + 1, major) : value(i, major, minor + 1);
        EXPECT_EQ(got[lane][i], lo | (hi << 16)) << "lane " << lane << " matrix " << i << (transposed ? " .trans" : "");
      }
  }
}

// wgmma (sm_90a) as the PTX ISA lays it out, checked against plain products. Shared memory
// is written here with the 128-byte swizzle stated as TMA writes it (row r of 128 bytes keeps
// its 16-byte piece p at p ^ (r % 8)), which the emulator reads by address bits instead.
namespace wgmma_test {
constexpr std::uint32_t kA = 0, kBk = 8192, kBmn = 24576;  // tile bases, 1024-byte aligned
std::uint64_t descriptor(std::uint32_t start, std::uint32_t lbo, std::uint32_t sbo) {
  return std::uint64_t{start >> 4} | std::uint64_t{lbo >> 4} << 16 | std::uint64_t{sbo >> 4} << 32 | std::uint64_t{1} << 62;
}
std::uint32_t swizzled(std::uint32_t row_start, int col) {  // a 128-byte row at row_start (row index from the address)
  return row_start + ((((col % 64) / 8) ^ ((row_start / 128) % 8)) * 16) + (col % 8) * 2;
}
float value(int which, int i, int j) {
  return static_cast<float>(BFloat16(0.125f * ((i * (3 + which) + j * (5 + 2 * which)) % 17) - 1.0f));
}
std::uint32_t pack(float lo, float hi) {
  return static_cast<std::uint32_t>(BFloat16(lo).bits) | (static_cast<std::uint32_t>(BFloat16(hi).bits) << 16);
}
// A: 64 x 64 K-major (rows m); Bk: 128 x 64 K-major (rows n); Bmn: 16 x 128 MN-major (rows k,
// two 64-column blocks of 16 rows, 2048 bytes apart).
void fill_shared(unsigned char* shared) {
  auto put = [&](std::uint32_t at, float v) {
    const std::uint16_t bits = BFloat16(v).bits;
    std::memcpy(shared + at, &bits, 2);
  };
  for (int m = 0; m < 64; ++m)
    for (int k = 0; k < 64; ++k) put(swizzled(kA + 128 * m, k), value(0, m, k));
  for (int n = 0; n < 128; ++n)
    for (int k = 0; k < 64; ++k) put(swizzled(kBk + 128 * n, k), value(1, n, k));
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 128; ++n) put(swizzled(kBmn + n / 64 * 2048 + 128 * k, n), value(2, k, n));
}
}  // namespace wgmma_test

// D (64 x 128) = A B + C with A and B K-major in shared memory (the k slice 16..31, a start
// address inside the swizzled rows), and with A in registers (the m16n8k16 fragment of each
// warp's 16 rows) and B MN-major over two 64-column blocks (LBO); D in the accumulator layout.
TEST(CudaEmulator, WarpgroupProductsFollowThePtxLayouts) {
  using namespace wgmma_test;
  for (const bool a_in_registers : {false, true}) {
    float got[64][128] = {};
    ASSERT_EQ(run({1, 1, 1}, {128, 1, 1},
                  [&] {
                    auto* shared = static_cast<unsigned char*>(dynamic_shared_memory());
                    if (current().linear == 0) fill_shared(shared);
                    sync_threads();
                    const int warp = current().warp, lane = current().lane, g = lane / 4, t = lane % 4;
                    auto row = [&](int i) { return 16 * warp + g + (i % 4 >= 2 ? 8 : 0); };
                    auto col = [&](int i) { return 8 * (i / 4) + 2 * t + (i & 1); };
                    float d[64];
                    for (int i = 0; i < 64; ++i) d[i] = static_cast<float>(row(i) - col(i));  // C
                    if (a_in_registers) {
                      const int r = 16 * warp + g;
                      auto a = [&](int m, int k) { return value(0, m, k); };
                      const std::uint32_t regs[4] = {pack(a(r, 2 * t), a(r, 2 * t + 1)),
                                                     pack(a(r + 8, 2 * t), a(r + 8, 2 * t + 1)),
                                                     pack(a(r, 2 * t + 8), a(r, 2 * t + 9)),
                                                     pack(a(r + 8, 2 * t + 8), a(r + 8, 2 * t + 9))};
                      wgmma_bf16(d, 128, 0, regs, descriptor(kBmn, 2048, 1024), true, true);
                    } else {
                      wgmma_bf16(d, 128, descriptor(kA + 32, 16, 1024), nullptr, descriptor(kBk + 32, 16, 1024), false,
                                 true);
                    }
                    async_commit();
                    wgmma_wait(0);
                    for (int i = 0; i < 64; ++i) got[row(i)][col(i)] = d[i];
                  },
                  32768),
              LaunchStatus::ok);
    for (int m = 0; m < 64; ++m)
      for (int n = 0; n < 128; ++n) {
        double want = m - n;
        for (int k = 0; k < 16; ++k)
          want += a_in_registers ? static_cast<double>(value(0, m, k)) * value(2, k, n)
                                 : static_cast<double>(value(0, m, 16 + k)) * value(1, n, 16 + k);
        ASSERT_NEAR(got[m][n], want, 1e-4) << m << ", " << n << (a_in_registers ? " (A in registers)" : "");
      }
  }
}

// A product is issued, not done: its accumulators change when the thread waits for its group
// (reading them earlier is a bug the emulator shows as stale values, as a GPU may), and it
// reads its A registers then; a thread that exits without waiting is a fault; only the
// 128-byte swizzle is emulated.
TEST(CudaEmulator, WarpgroupProductsRunWhenWaitedFor) {
  using namespace wgmma_test;
  float before = 0.0f, after = 0.0f;
  ASSERT_EQ(run({1, 1, 1}, {128, 1, 1},
                [&] {
                  auto* shared = static_cast<unsigned char*>(dynamic_shared_memory());
                  if (current().linear == 0) fill_shared(shared);
                  sync_threads();
                  float d[32] = {};
                  wgmma_bf16(d, 64, descriptor(kA, 16, 1024), nullptr, descriptor(kBk, 16, 1024), false, false);
                  async_commit();
                  if (current().linear == 0) before = d[0];
                  wgmma_wait(0);
                  if (current().linear == 0) after = d[0];
                },
                32768),
            LaunchStatus::ok);
  double want = 0.0;
  for (int k = 0; k < 16; ++k) want += static_cast<double>(value(0, 0, k)) * value(1, 0, k);
  EXPECT_EQ(before, 0.0f);
  EXPECT_NEAR(after, want, 1e-4);
  // A in registers is read when the product runs: registers every lane overwrote before the
  // wait (a race on a GPU) give the new values' product.
  float raced = 0.0f;
  ASSERT_EQ(run({1, 1, 1}, {128, 1, 1},
                [&] {
                  auto* shared = static_cast<unsigned char*>(dynamic_shared_memory());
                  if (current().linear == 0) fill_shared(shared);
                  sync_threads();
                  std::uint32_t regs[4] = {};  // A = 0
                  float d[32] = {};
                  wgmma_bf16(d, 64, 0, regs, descriptor(kBmn, 2048, 1024), true, false);
                  async_commit();
                  for (auto& r : regs) r = pack(1.0f, 1.0f);  // A = 1 everywhere
                  wgmma_wait(0);
                  if (current().linear == 0) raced = d[0];
                },
                32768),
            LaunchStatus::ok);
  double ones = 0.0;
  for (int k = 0; k < 16; ++k) ones += value(2, k, 0);
  EXPECT_NEAR(raced, ones, 1e-4);
  const std::string unwaited = error_of([&] {
    run({1, 1, 1}, {128, 1, 1}, [&] {
      float d[32] = {};
      wgmma_bf16(d, 64, descriptor(kA, 16, 1024), nullptr, descriptor(kBk, 16, 1024), false, false);
      async_commit();
    }, 32768);
  });
  EXPECT_NE(unwaited.find("never waited for"), std::string::npos) << unwaited;
  const std::string unswizzled = error_of([&] {
    run({1, 1, 1}, {128, 1, 1}, [&] {
      float d[32] = {};
      wgmma_bf16(d, 64, descriptor(kA, 16, 1024) & ~(std::uint64_t{3} << 62), nullptr, descriptor(kBk, 16, 1024),
                 false, false);
      async_commit();
      async_wait(0);
    }, 32768);
  });
  EXPECT_NE(unswizzled.find("128-byte swizzle"), std::string::npos) << unswizzled;
}

TEST(CudaEmulator, LdmatrixAndAsyncCopiesOutsideSharedMemoryAreFaults) {
  std::vector<std::uint16_t> global(64, 1);
  const std::string bad_row = error_of([&] {
    run({1, 1, 1}, {32, 1, 1}, [&] {
      std::uint32_t r[4];
      ldmatrix_x4(r, global.data(), false);
    }, 256);
  });
  EXPECT_NE(bad_row.find("outside the block's dynamic shared memory"), std::string::npos) << bad_row;
  const std::string misaligned = error_of([&] {
    run({1, 1, 1}, {32, 1, 1}, [&] {
      std::uint32_t r[4];
      ldmatrix_x4(r, static_cast<char*>(dynamic_shared_memory()) + 8, false);
    }, 256);
  });
  EXPECT_NE(misaligned.find("not 16-byte aligned"), std::string::npos) << misaligned;
  const std::string bad_copy = error_of([&] {
    run({1, 1, 1}, {1, 1, 1}, [&] { copy_async_16(global.data(), global.data() + 8, true); }, 64);
  });
  EXPECT_NE(bad_copy.find("cp.async destination"), std::string::npos) << bad_copy;
}

// cp.async of 16 bytes: a copy, or 16 zero bytes in its src-size-0 form (where the source
// is not read).
TEST(CudaEmulator, AsyncCopiesCopyOrZeroFillSixteenBytes) {
  alignas(16) std::uint8_t source[32];
  std::iota(source, source + 32, std::uint8_t{1});
  std::uint8_t got[32] = {};
  ASSERT_EQ(run({1, 1, 1}, {1, 1, 1},
                [&] {
                  auto* shared = static_cast<std::uint8_t*>(dynamic_shared_memory());
                  copy_async_16(shared, source, true);
                  copy_async_16(shared + 16, source + 16, false);
                  std::memcpy(got, shared, 32);
                },
                32),
            LaunchStatus::ok);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(got[i], source[i]);
  for (int i = 16; i < 32; ++i) EXPECT_EQ(got[i], 0);
}

// A producer warp hands tiles to three consumer warps through two buffers guarded by
// mbarriers ("full": the tile is written; "free": every consumer has read it), as the
// warp-specialised flash kernel does: every consumer sees every tile in order, whatever order
// the threads run in, and the producer never overwrites a buffer still being read.
TEST(CudaEmulator, MbarriersHandTilesFromAProducerWarpToConsumersInPhases) {
  constexpr int kTiles = 7, kBuffers = 2, kConsumers = 3;
  std::vector<int> seen(kConsumers * 32 * kTiles, -1);
  const LaunchStatus status = run({1, 1, 1}, {32 * (1 + kConsumers), 1, 1}, [&] {
    auto* bars = static_cast<std::uint64_t*>(dynamic_shared_memory());  // full[2], free[2]
    int* buffer = reinterpret_cast<int*>(bars + 2 * kBuffers);          // kBuffers x 32 ints
    const ThreadContext& t = current();
    if (t.linear == 0)
      for (int s = 0; s < kBuffers; ++s) {
        mbarrier_init(&bars[s], 32);                       // each producer lane arrives
        mbarrier_init(&bars[kBuffers + s], kConsumers * 32);  // each consumer lane arrives
      }
    sync_threads();
    if (t.warp == 0) {
      for (int i = 0; i < kTiles; ++i) {
        const int s = i % kBuffers;
        if (i >= kBuffers) mbarrier_wait_parity(&bars[kBuffers + s], (i / kBuffers - 1) & 1);
        buffer[s * 32 + t.lane] = 100 * i + t.lane;
        mbarrier_arrive(&bars[s]);
      }
      return;
    }
    for (int i = 0; i < kTiles; ++i) {
      const int s = i % kBuffers;
      mbarrier_wait_parity(&bars[s], (i / kBuffers) & 1);
      seen[((t.warp - 1) * 32 + t.lane) * kTiles + i] = buffer[s * 32 + (t.lane + t.warp) % 32];
      mbarrier_arrive(&bars[kBuffers + s]);
    }
  }, 4 * 8 + kBuffers * 32 * sizeof(int));
  ASSERT_EQ(status, LaunchStatus::ok);
  for (int w = 1; w <= kConsumers; ++w)
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < kTiles; ++i)
        ASSERT_EQ(seen[((w - 1) * 32 + lane) * kTiles + i], 100 * i + (lane + w) % 32) << "warp " << w << " tile " << i;
}

// Waiting for a phase no one completes is a deadlock named as such, not a hang; a barrier used
// before mbarrier.init, or a bad count, is a fault.
TEST(CudaEmulator, MbarrierMisuseIsAFaultNotAHang) {
  const std::string stuck = error_of([&] {
    run({1, 1, 1}, {64, 1, 1}, [&] {
      auto* bar = static_cast<std::uint64_t*>(dynamic_shared_memory());
      if (current().linear == 0) mbarrier_init(bar, 64);
      sync_threads();
      if (current().warp == 0) mbarrier_arrive(bar);  // warp 1 never arrives
      mbarrier_wait_parity(bar, 0);
    }, 8);
  });
  EXPECT_NE(stuck.find("deadlock"), std::string::npos) << stuck;
  EXPECT_NE(stuck.find("64 at mbarriers"), std::string::npos) << stuck;
  const std::string uninitialised = error_of([&] {
    run({1, 1, 1}, {32, 1, 1}, [&] { mbarrier_arrive(dynamic_shared_memory()); }, 8);
  });
  EXPECT_NE(uninitialised.find("mbarrier.init did not set up"), std::string::npos) << uninitialised;
  const std::string zero = error_of([&] { run({1, 1, 1}, {1, 1, 1}, [&] { mbarrier_init(dynamic_shared_memory(), 0); }, 8); });
  EXPECT_NE(zero.find("count 0"), std::string::npos) << zero;
  // A passed phase: the previous phase's parity counts as complete at once (how a producer's
  // first waits for free buffers pass).
  EXPECT_EQ(run({1, 1, 1}, {1, 1, 1}, [&] {
    auto* bar = dynamic_shared_memory();
    mbarrier_init(bar, 1);
    mbarrier_wait_parity(bar, 1);
    mbarrier_arrive(bar);
    mbarrier_wait_parity(bar, 0);
  }, 8), LaunchStatus::ok);
}

TEST(CudaEmulator, CudaTensorsLiveInEmulatedDeviceMemory) {
  EXPECT_TRUE(active());
  const std::uint64_t copies = copies_to_host();
  const Tensor t = Tensor::arange(5, DType::f32, Device::cuda(0));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4}));
  EXPECT_GT(copies_to_host(), copies);
}

TEST(CudaEmulatorDeathTest, HostCodeThatDereferencesADevicePointerCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Tensor t = Tensor::zeros({1024}, DType::f32, Device::cuda(0));
  EXPECT_DEATH({ std::printf("%f\n", t.data<float>()[3]); }, "");
}

// A trap breaks the context for good, as on a GPU: the kernel's launch fails, and so does
// every later call (here the next tensor's allocation or fill), which ends the process with
// exit 70 (core/cuda/cuda_check.h) instead of letting it go on on a broken device. An
// emulator fault of its own (a deadlock) leaves the context usable.
TEST(CudaEmulatorDeathTest, ATrapBreaksTheContextForEveryLaterCall) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string deadlock = error_of([&] {
    run({1, 1, 1}, {64, 1, 1}, [&] {
      if (current().warp == 0) sync_threads();
      else if (current().lane < 16) sync_warp(0xffffffffu);  // waits for lanes parked at the block barrier
      else sync_threads();
    });
  });
  EXPECT_NE(deadlock.find("deadlock"), std::string::npos) << deadlock;
  EXPECT_FALSE(context_broken());
  EXPECT_EQ(Tensor::arange(3, DType::f32, Device::cuda(0)).to_vector<float>(), (std::vector<float>{0, 1, 2}));
  EXPECT_EXIT(
      {
        const std::string fault = error_of([&] {
          run({1, 1, 1}, {32, 1, 1}, [&] {
            if (current().lane == 3) trap();
          });
        });
        std::fprintf(stderr, "fault: %s; broken: %d\n", fault.c_str(), context_broken() ? 1 : 0);
        (void)Tensor::zeros({16}, DType::f32, Device::cuda(0)).to_vector<float>();
        std::fprintf(stderr, "a call after the trap succeeded\n");
        std::exit(0);
      },
      ::testing::ExitedWithCode(70),
      "fault: CUDA emulator: [^\n]*__trap\\(\\); broken: 1\n"
      "darkformer: fatal CUDA error: [^\n]*cudaErrorLaunchFailure \\(unspecified launch failure\\)\n"
      "darkformer: the error is sticky: this process's CUDA context is broken");
  EXPECT_FALSE(context_broken()) << "the trap happened in this process, not in the death test's child";
}

TEST(CudaEmulator, AllocationsBeyondTheCapacityFailAsOnAGpu) {
  const std::size_t capacity = memory_capacity();
  set_memory_capacity(std::size_t{64} << 20);
  const std::string e = error_of([] { Tensor::empty({std::int64_t{40} << 20}, DType::f32, Device::cuda(0)); });
  set_memory_capacity(capacity);
  EXPECT_NE(e.find("out of memory"), std::string::npos) << e;
}

}  // namespace
}  // namespace dark::cuda_emu
