// Rotary position embedding (Hugging Face Llama convention, rotate_half), fused: one tape
// entry whose backward is the rotation by the negative angle, a layer's queries and keys
// together (rope_pair: one kernel launch each way for both). The cos / sin tables (T, D/2)
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

void check_rope_input(const Tensor& x, double theta) {
  ops_detail::check_floating("rope", x);
  DARK_CHECK(x.dim() == 4, "rope: x must be (B, T, H, D), got ", x.describe());
  DARK_CHECK(x.shape()[3] % 2 == 0, "rope: the head dimension D must be even, got ", x.describe());
  DARK_CHECK(theta > 0, "rope: theta must be > 0, got ", theta);
}

// Rotates x (and x2 where defined, in the same launch) by the tables: the new tensors.
std::pair<Tensor, Tensor> rotate(const Tensor& x, const Tensor& x2, const RopeTables& tables, bool inverse) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor y2 = x2.defined() ? Tensor::empty(x2.shape(), x2.dtype(), x2.device()) : Tensor();
  kernels::rope().get(x.device().type, x.dtype())(x, x2, tables.cos, tables.sin, y, y2, inverse);
  return {y, y2};
}

}  // namespace

Tensor rope(const Tensor& x_in, double theta, std::int64_t position_offset) {
  return rope_pair(x_in, Tensor(), theta, position_offset).q;
}

RopedPair rope_pair(const Tensor& q_in, const Tensor& k_in, double theta, std::int64_t position_offset) {
  check_rope_input(q_in, theta);
  if (k_in.defined()) {
    check_rope_input(k_in, theta);
    ops_detail::check_same("rope", q_in, k_in);
    DARK_CHECK(
        k_in.shape()[0] == q_in.shape()[0] && k_in.shape()[1] == q_in.shape()[1] && k_in.shape()[3] == q_in.shape()[3],
        "rope: queries ", q_in.describe(), " and keys ", k_in.describe(), " differ in more than their heads");
  }
  const Tensor q = q_in.contiguous(), k = k_in.defined() ? k_in.contiguous() : Tensor();
  const RopeTables tables =
      rope_tables({q.shape()[1], q.shape()[3], theta, position_offset, grad_dtype(q.dtype()), q.device()});
  auto [yq, yk] = rotate(q, k, tables, false);
  if (should_record({&q_in, &k_in})) {
    std::vector<Tensor*> outputs = {&yq};
    if (k.defined()) outputs.push_back(&yk);
    const std::size_t inputs = outputs.size();
    record("rope", k.defined() ? std::vector<Tensor>{q_in, k_in} : std::vector<Tensor>{q_in}, outputs,
           [tables, inputs](BackwardContext& g) {
             // The inputs that want a gradient, rotated back in one launch.
             std::vector<std::size_t> wanted;
             for (std::size_t i = 0; i < inputs; ++i)
               if (g.needs_grad(i)) wanted.push_back(i);
             if (wanted.empty()) return;
             const Tensor d0 = g.out_grad(wanted[0]).contiguous();
             const Tensor d1 = wanted.size() > 1 ? g.out_grad(wanted[1]).contiguous() : Tensor();
             const auto [dx0, dx1] = rotate(d0, d1, tables, true);
             g.set_input_grad(wanted[0], dx0);
             if (wanted.size() > 1) g.set_input_grad(wanted[1], dx1);
           });
  }
  return {yq, yk};
}

}  // namespace dark
