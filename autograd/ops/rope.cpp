// Rotary position embedding (Hugging Face Llama convention, rotate_half), fused: one tape
// entry whose backward is the rotation by the negative angle. The cos / sin tables (T, D/2)
// are computed in double, rounded to the compute dtype, and kept in a small cache keyed by
// (T, D, theta, offset, dtype, device) so a training loop builds them once.
#include <cmath>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {
namespace {

struct RopeKey {
  std::int64_t t = 0, d = 0;
  double theta = 0;
  std::int64_t offset = 0;
  DType dtype = DType::f32;
  Device device = Device::cpu();
  bool operator==(const RopeKey& o) const {
    return t == o.t && d == o.d && theta == o.theta && offset == o.offset && dtype == o.dtype && device == o.device;
  }
};

struct RopeTables {
  Tensor cos, sin;  // (T, D/2)
};

// A few recent tables (training uses one or two shapes; decoding walks offsets). Leaked on
// purpose: it holds device memory and must not be destroyed after the device allocators.
class RopeCache {
 public:
  static constexpr std::size_t kCapacity = 16;

  RopeTables get(const RopeKey& key) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& [k, tables] : entries_)
        if (k == key) return tables;
    }
    RopeTables tables = build(key);
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.emplace_back(key, tables);
    if (entries_.size() > kCapacity) entries_.pop_front();
    return tables;
  }

 private:
  static RopeTables build(const RopeKey& key) {
    const std::int64_t half = key.d / 2;
    std::vector<double> c(static_cast<std::size_t>(key.t * half)), s(c.size());
    for (std::int64_t i = 0; i < half; ++i) {
      const double inv_freq = std::pow(key.theta, -2.0 * static_cast<double>(i) / static_cast<double>(key.d));
      for (std::int64_t t = 0; t < key.t; ++t) {
        const double angle = static_cast<double>(t + key.offset) * inv_freq;
        c[t * half + i] = std::cos(angle);
        s[t * half + i] = std::sin(angle);
      }
    }
    return {Tensor::from_vector(c, {key.t, half}).to(key.dtype).to(key.device),
            Tensor::from_vector(s, {key.t, half}).to(key.dtype).to(key.device)};
  }

  std::mutex mutex_;
  std::deque<std::pair<RopeKey, RopeTables>> entries_;
};

RopeTables rope_tables(const RopeKey& key) {
  static RopeCache* cache = new RopeCache;
  return cache->get(key);
}

}  // namespace

Tensor rope(const Tensor& x_in, double theta, std::int64_t position_offset) {
  ops_detail::check_floating("rope", x_in);
  DARK_CHECK(x_in.dim() == 4, "rope: x must be (B, T, H, D), got ", x_in.describe());
  const std::int64_t t = x_in.shape()[1], d = x_in.shape()[3];
  DARK_CHECK(d % 2 == 0, "rope: the head dimension D must be even, got ", x_in.describe());
  DARK_CHECK(theta > 0, "rope: theta must be > 0, got ", theta);
  const Tensor x = x_in.contiguous();
  const RopeTables tables =
      rope_tables({t, d, theta, position_offset, grad_dtype(x.dtype()), x.device()});
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  kernels::rope().get(x.device().type, x.dtype())(x, tables.cos, tables.sin, y, false);
  if (should_record({&x_in})) {
    record("rope", {x_in}, {&y}, [tables](BackwardContext& g) {
      const Tensor dy = g.out_grad().contiguous();
      Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
      kernels::rope().get(dy.device().type, dy.dtype())(dy, tables.cos, tables.sin, dx, true);
      g.set_input_grad(0, dx);
    });
  }
  return y;
}

}  // namespace dark
