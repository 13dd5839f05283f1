// Index kernels for f32, f64 and bf16 (bf16 accumulates in float); gather and cumsum also
// for i32 and i64, as on the CPU:
//   gather       x: (outer, n, inner), index: (k) i32/i64 -> out: (outer, k, inner),
//                out[o, j, i] = x[o, index[j], i]
//   scatter_add  dx: (outer, n, inner) += dout: (outer, k, inner) at index: (k), the
//                backward of gather. Deterministic without atomics in the sums: a stable
//                radix sort (CUB) groups equal indices while keeping their order, then one
//                thread per (o, group, i) sums dx + dout[first] + dout[second] + ... in index
//                order, as a sequential CPU loop does.
//   An index outside [0, n) is an error with the CPU's message, raised before anything is
//   written (dx stays unchanged): a kernel over the k indices records the first bad
//   position on the device (BadIndex) and the host reads it back before going on. Inside a
//   DeferredChecks scope (core/deferred_checks.h) the position goes to the scope's word
//   instead, nothing is read back, and a bad index gathers 0 / scatters nothing.
//   cumsum       out: (outer, n, inner) inclusive prefix sums along n (reverse: from the
//                end). inner == 1 with long rows: one block per row (CUB BlockScan over
//                tiles, carrying the running total); otherwise one thread per (o, i) summing
//                sequentially. Both orders are fixed, so results are reproducible.
#include <cstdint>

#include "core/cuda/cub.cuh"
#include "core/cuda/device_check.cuh"
#include "core/deferred_checks.h"
#include "core/cuda/launch.cuh"
#include "core/kernels.h"

namespace dark::cuda {
namespace {

void check_index(const char* kernel, const Tensor& index, const Tensor& like) {
  DARK_CHECK(index.dtype() == DType::i32 || index.dtype() == DType::i64, kernel, ": index ",
             index.describe(), " must be i32 or i64");
  DARK_CHECK(index.is_contiguous(), kernel, ": index ", index.describe(), " is not contiguous");
  DARK_CHECK(index.device() == like.device(), kernel, ": index ", index.describe(), " and ",
             like.describe(), " are on different devices");
}

void check_3d(const char* kernel, const char* role, const Tensor& t, std::int64_t outer,
              std::int64_t mid, std::int64_t inner) {
  DARK_CHECK(outer >= 0 && mid >= 0 && inner >= 0 && t.numel() == outer * mid * inner && t.is_contiguous(),
             kernel, ": ", role, " ", t.describe(), " is not a contiguous (", outer, ", ", mid, ", ",
             inner, ")");
}

// ---------------------------------------------------------------- bad indices

// The lowest position whose index lies outside [0, n) (device_check.cuh), read back before
// anything is written: a synchronisation per call.
class BadIndex {
 public:
  explicit BadIndex(Device device) : first_(device) {}
  unsigned long long* slot() const { return first_.slot(); }
  // Throws the CPU's message (index_out_of_range) if a kernel recorded a bad index.
  void check(const char* kernel, const Tensor& index, std::int64_t n) const {
    if (const std::int64_t j = first_.first(); j >= 0) throw Error(index_out_of_range(kernel, integer_at(index, j), j, n));
  }

 private:
  FirstBad first_;
};

__device__ __forceinline__ void record_bad_index(unsigned long long* bad, std::int64_t j) { flag_bad(bad, j); }

// ---------------------------------------------------------------- gather

// One thread per index: records the out-of-range ones (gather's check, run first so that,
// as on the CPU, nothing is written when an index is bad).
template <class I>
__global__ void find_bad_index_kernel(const I* index, std::int64_t k, std::int64_t n, unsigned long long* bad) {
  for (std::int64_t j = global_thread(); j < k; j += grid_threads()) {
    const std::int64_t r = static_cast<std::int64_t>(index[j]);
    if (r < 0 || r >= n) record_bad_index(bad, j);
  }
}

// An index outside [0, n) gathers 0 (only reachable when its check is deferred).
template <class T, class I>
__global__ void gather_kernel(const T* x, const I* index, T* out, std::int64_t outer, std::int64_t n,
                              std::int64_t k, std::int64_t inner) {
  const std::int64_t total = outer * k * inner;
  for (std::int64_t e = global_thread(); e < total; e += grid_threads()) {
    const std::int64_t i = e % inner;
    const std::int64_t j = (e / inner) % k;
    const std::int64_t o = e / (inner * k);
    const std::int64_t r = static_cast<std::int64_t>(index[j]);
    out[e] = (r >= 0 && r < n) ? x[(o * n + r) * inner + i] : convert<T>(0.0);
  }
}

template <class T, class I>
void gather_typed(const Tensor& x, const Tensor& index, Tensor& out, std::int64_t outer, std::int64_t n,
                  std::int64_t k, std::int64_t inner) {
  if (std::int64_t* deferred = DeferredChecks::slot_for("gather", index, n)) {
    launch(find_bad_index_kernel<I>, {grid_for(k), kThreads}, index.data<I>(), k, n,
           reinterpret_cast<unsigned long long*>(deferred));
  } else {
    const BadIndex bad(out.device());
    launch(find_bad_index_kernel<I>, {grid_for(k), kThreads}, index.data<I>(), k, n, bad.slot());
    bad.check("gather", index, n);
  }
  const std::int64_t total = outer * k * inner;
  if (total == 0) return;
  launch(gather_kernel<T, I>, {grid_for(total), kThreads}, x.data<T>(), index.data<I>(), out.data<T>(), outer, n, k,
                                                     inner);
  DARK_CUDA_CHECK_LAUNCH();
}

template <class T>
void gather(const Tensor& x, const Tensor& index, Tensor& out, std::int64_t outer, std::int64_t n,
            std::int64_t inner) {
  check_index("gather", index, x);
  const std::int64_t k = index.numel();
  check_3d("gather", "x", x, outer, n, inner);
  check_3d("gather", "out", out, outer, k, inner);
  check_dtype<T>("gather", {{"x", &x}, {"out", &out}});
  if (k == 0) return;
  DeviceGuard guard(out);
  if (index.dtype() == DType::i32) gather_typed<T, std::int32_t>(x, index, out, outer, n, k, inner);
  else gather_typed<T, std::int64_t>(x, index, out, outer, n, k, inner);
}

// ---------------------------------------------------------------- scatter_add

// keys[j] = index[j], positions[j] = j; an out-of-range index is recorded in `bad` (the
// host then throws before sorting or summing anything).
template <class I>
__global__ void scatter_keys_kernel(const I* index, std::uint64_t* keys, std::int64_t* positions,
                                    std::int64_t k, std::int64_t n, unsigned long long* bad) {
  for (std::int64_t j = global_thread(); j < k; j += grid_threads()) {
    const std::int64_t r = static_cast<std::int64_t>(index[j]);
    const bool good = r >= 0 && r < n;
    if (!good) record_bad_index(bad, j);
    keys[j] = static_cast<std::uint64_t>(good ? r : n);  // n: past every row, skipped by the sum
    positions[j] = j;
  }
}

// One thread per (o, p, i) of the sorted order; only the first entry p of each run of
// equal keys works, summing the run in (stable, i.e. original) order. dx is in dout's dtype
// or its accumulation type (bf16 gradients summed into an f32 master weight's: the bits of
// casting dout first).
template <class T, class Out>
__global__ void scatter_sum_kernel(const T* dout, const std::uint64_t* keys,
                                   const std::int64_t* positions, Out* dx, std::int64_t outer,
                                   std::int64_t n, std::int64_t k, std::int64_t inner) {
  const std::int64_t total = outer * k * inner;
  for (std::int64_t e = global_thread(); e < total; e += grid_threads()) {
    const std::int64_t i = e % inner;
    const std::int64_t p = (e / inner) % k;
    const std::int64_t o = e / (inner * k);
    const std::uint64_t key = keys[p];
    if ((p > 0 && keys[p - 1] == key) || key >= static_cast<std::uint64_t>(n)) continue;
    const std::int64_t r = static_cast<std::int64_t>(key);
    Out* target = dx + (o * n + r) * inner + i;
    acc_t<T> acc = load(target, 0);
    for (std::int64_t q = p; q < k && keys[q] == key; ++q)
      acc += load(dout, (o * k + positions[q]) * inner + i);
    store(target, 0, acc);
  }
}

int bits_for(std::int64_t max_key) {
  int bits = 1;
  while (bits < 64 && (static_cast<std::uint64_t>(max_key) >> bits) != 0) ++bits;
  return bits;
}

template <class T>
void scatter_add(const Tensor& dout, const Tensor& index, Tensor& dx, std::int64_t outer,
                 std::int64_t n, std::int64_t inner) {
  check_index("scatter_add", index, dx);
  const std::int64_t k = index.numel();
  check_3d("scatter_add", "dout", dout, outer, k, inner);
  check_3d("scatter_add", "dx", dx, outer, n, inner);
  check_dtype<T>("scatter_add", {{"dout", &dout}});
  DARK_CHECK(dx.dtype() == dout.dtype() || dx.dtype() == dtype_of<acc_t<T>>::value, "scatter_add: dx ", dx.describe(),
             " is neither dout's dtype nor its accumulation type, ", dtype_name(dtype_of<acc_t<T>>::value));
  DARK_CHECK(dout.device() == dx.device(), "scatter_add: dout ", dout.describe(), " and dx ",
             dx.describe(), " are on different devices");
  if (k == 0) return;
  DeviceGuard guard(dx);
  const Device device = dx.device();
  // Temporaries come from the caching allocator; everything runs on one stream (stream.h), so
  // a block reused after release is only touched after these kernels finish.
  Tensor keys_in = Tensor::empty({k}, DType::i64, device), keys_out = Tensor::empty({k}, DType::i64, device);
  Tensor pos_in = Tensor::empty({k}, DType::i64, device), pos_out = Tensor::empty({k}, DType::i64, device);
  auto* keys_in_p = reinterpret_cast<std::uint64_t*>(keys_in.data<std::int64_t>());
  auto* keys_out_p = reinterpret_cast<std::uint64_t*>(keys_out.data<std::int64_t>());
  std::int64_t* deferred = DeferredChecks::slot_for("scatter_add", index, n);
  const BadIndex bad(device);
  unsigned long long* slot = deferred ? reinterpret_cast<unsigned long long*>(deferred) : bad.slot();
  if (index.dtype() == DType::i32) {
    launch(scatter_keys_kernel<std::int32_t>, {grid_for(k), kThreads},
        index.data<std::int32_t>(), keys_in_p, pos_in.data<std::int64_t>(), k, n, slot);
  } else {
    launch(scatter_keys_kernel<std::int64_t>, {grid_for(k), kThreads},
        index.data<std::int64_t>(), keys_in_p, pos_in.data<std::int64_t>(), k, n, slot);
  }
  if (!deferred) bad.check("scatter_add", index, n);  // every key is in [0, n] now: bits_for(n) bits sort them
  if (outer * inner == 0) return;

  const int end_bit = bits_for(n);
  std::size_t temp_bytes = 0;
  DARK_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in_p, keys_out_p,
                                                  pos_in.data<std::int64_t>(), pos_out.data<std::int64_t>(),
                                                  k, 0, end_bit, current_stream()));
  Tensor temp = Tensor::empty({static_cast<std::int64_t>((temp_bytes + 7) / 8)}, DType::i64, device);
  DARK_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw_data(), temp_bytes, keys_in_p, keys_out_p,
                                                  pos_in.data<std::int64_t>(), pos_out.data<std::int64_t>(),
                                                  k, 0, end_bit, current_stream()));

  const std::int64_t total = outer * k * inner;
  if (dx.dtype() == dout.dtype())
    launch(scatter_sum_kernel<T, T>, {grid_for(total), kThreads}, dout.data<T>(), keys_out_p,
           pos_out.data<std::int64_t>(), dx.data<T>(), outer, n, k, inner);
  else
    launch(scatter_sum_kernel<T, acc_t<T>>, {grid_for(total), kThreads}, dout.data<T>(), keys_out_p,
           pos_out.data<std::int64_t>(), dx.data<acc_t<T>>(), outer, n, k, inner);
  DARK_CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------- cumsum

// One thread per (o, i): sequential along n.
template <class T>
__global__ void cumsum_columns_kernel(const T* x, T* out, std::int64_t outer, std::int64_t n,
                                      std::int64_t inner, bool reverse) {
  const std::int64_t total = outer * inner;
  for (std::int64_t e = global_thread(); e < total; e += grid_threads()) {
    const std::int64_t o = e / inner, i = e % inner;
    const std::int64_t base = o * n * inner + i;
    acc_t<T> acc = acc_t<T>(0);
    for (std::int64_t s = 0; s < n; ++s) {
      const std::int64_t j = reverse ? n - 1 - s : s;
      acc += load(x, base + j * inner);
      store(out, base + j * inner, acc);
    }
  }
}

constexpr int kScanThreads = 256;
constexpr int kScanItems = 4;  // consecutive elements per thread per tile

// One block per row of x: (rows, n); tiles of kScanThreads * kScanItems elements.
template <class T>
__global__ void cumsum_rows_kernel(const T* x, T* out, std::int64_t rows, std::int64_t n, bool reverse) {
  using A = acc_t<T>;
  using Scan = cub::BlockScan<A, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  constexpr std::int64_t kTile = static_cast<std::int64_t>(kScanThreads) * kScanItems;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * n;
    T* yr = out + row * n;
    A carry = A(0);
    for (std::int64_t base = 0; base < n; base += kTile) {
      A items[kScanItems];
#pragma unroll
      for (int q = 0; q < kScanItems; ++q) {
        const std::int64_t s = base + threadIdx.x * kScanItems + q;
        items[q] = s < n ? load(xr, reverse ? n - 1 - s : s) : A(0);
      }
      A tile_total;
      Scan(temp).InclusiveSum(items, items, tile_total);
#pragma unroll
      for (int q = 0; q < kScanItems; ++q) {
        const std::int64_t s = base + threadIdx.x * kScanItems + q;
        if (s < n) store(yr, reverse ? n - 1 - s : s, carry + items[q]);
      }
      carry += tile_total;
      __syncthreads();  // temp is reused by the next tile
    }
  }
}

template <class T>
void cumsum(const Tensor& x, Tensor& out, std::int64_t outer, std::int64_t n, std::int64_t inner,
            bool reverse) {
  check_3d("cumsum", "x", x, outer, n, inner);
  check_3d("cumsum", "out", out, outer, n, inner);
  check_dtype<T>("cumsum", {{"x", &x}, {"out", &out}});
  if (outer * n * inner == 0) return;
  DeviceGuard guard(out);
  if (inner == 1 && n > 64) {
    launch(cumsum_rows_kernel<T>, {grid_for(outer, 1), kScanThreads}, x.data<T>(), out.data<T>(), outer, n, reverse);
  } else {
    launch(cumsum_columns_kernel<T>, {grid_for(outer * inner), kThreads}, x.data<T>(), out.data<T>(), outer,
                                                                    n, inner, reverse);
  }
  DARK_CUDA_CHECK_LAUNCH();
}

#define DARK_REGISTER_INDEX(DTYPE, T)                            \
  DARK_REGISTER_KERNEL(gather, cuda, DTYPE, &gather<T>);         \
  DARK_REGISTER_KERNEL(scatter_add, cuda, DTYPE, &scatter_add<T>); \
  DARK_REGISTER_KERNEL(cumsum, cuda, DTYPE, &cumsum<T>)
DARK_REGISTER_INDEX(f32, float);
DARK_REGISTER_INDEX(f64, double);
DARK_REGISTER_INDEX(bf16, BFloat16);
#undef DARK_REGISTER_INDEX
DARK_REGISTER_KERNEL(gather, cuda, i32, &gather<std::int32_t>);
DARK_REGISTER_KERNEL(gather, cuda, i64, &gather<std::int64_t>);
DARK_REGISTER_KERNEL(cumsum, cuda, i32, &cumsum<std::int32_t>);
DARK_REGISTER_KERNEL(cumsum, cuda, i64, &cumsum<std::int64_t>);

}  // namespace
}  // namespace dark::cuda
