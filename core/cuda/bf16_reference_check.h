// The bf16 random-feature kernels (tensor cores: mma.sync through block_mma.cuh) checked
// against their f32 kernels (CUDA cores, the same passes), the reference path that exists for
// each: the first bf16 call of each configuration in a process (the device, the op, which
// optional tensors are given, the feature, head and value widths, causal, window and chunk,
// and the length's class: the power of 4 at or above it; not the batch) also runs the f32
// kernel on the same inputs widened to f32 (the values the tensor cores read, exactly) into
// scratch outputs and compares every output. Beyond the bounds the GPU tests hold bf16
// kernels to against the CPU (|a - b| <= 5e-2 + 5e-2 |b| per element, 2e-2 in relative L2),
// an error names the op, the configuration and the difference, and every later call of that
// configuration runs the f32 kernel (inputs widened, outputs rounded to bf16). The check costs
// one f32 call and the f32 copies of one call's tensors, once per configuration. The length
// is in the key because the bounds are judged on the checked call: the rounding a pass
// accumulates grows with the length (longer sums, more chunks carried), so a verdict reached
// at 130 tokens says nothing of 32K (a configuration meets at most 9 classes up to 128K
// tokens). The device is in it because a verdict is a fact about one GPU. Checks of distinct
// configurations run concurrently (once_verdicts.h). A configuration first met while a CUDA
// graph is being captured (nothing can be read back then) runs the f32 kernel for that call.
#pragma once
#include <algorithm>
#include <compare>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace dark::cuda::bf16_check {

// How the bf16 kernel's outputs compare with the f32 kernel's.
struct Difference {
  std::string output, first_beyond;
  double max_abs = 0, relative_l2 = 0;
  bool within = true;
};
// `got` (bf16) against `want` under the bounds above; `output` names it. Equal values
// (infinities too) agree.
Difference compare(const std::string& output, const Tensor& got, const Tensor& want);
// "out max |diff| ..., relative L2 ... (bounds: ...; first beyond: ...)", for a message.
std::string describe_bounds(const Difference& d);

// The one of `diffs` that differs most: the first beyond the bounds, else the largest in
// relative L2 (an empty list: none, within).
Difference worst(const std::vector<Difference>& diffs);

// A call's configuration, made without allocating (it is built at every call): the op, the
// device, the length's class and per argument a tensor's last dimension (and the middle one
// of a 3-D tensor: omega's feature count; -1 undefined, -2 a mask, -3 a row statistic), a
// flag, a count, or 0 for eps (whose value runs the same code).
struct ConfigKey {
  static constexpr int kMaxParts = 32;
  const char* op = nullptr;
  int device = 0;
  std::int64_t length_class = 1;  // length_class(T)
  std::int64_t parts[kMaxParts] = {};
  int count = 0;

  auto operator<=>(const ConfigKey& other) const {
    if (auto c = std::string_view(op) <=> std::string_view(other.op); c != 0) return c;
    if (auto c = device <=> other.device; c != 0) return c;
    if (auto c = length_class <=> other.length_class; c != 0) return c;
    return std::lexicographical_compare_three_way(parts, parts + count, other.parts, other.parts + other.count);
  }
  bool operator==(const ConfigKey& other) const { return (*this <=> other) == 0; }
  std::string describe() const;  // "linear_attention_forward on cuda:0, length <= 256: 64 64 16 -2 ..."
};

// The power of 4 at or above `length` (1 for lengths below 2): 1, 4, 16, ..., 1024, 4096, ...
std::int64_t length_class(std::int64_t length);

// Whether a call of configuration `key` runs the bf16 kernel (true) or the f32 one: the
// verdict for `key`, from `check` (the worst output's difference) at its first call.
bool use_bf16(const ConfigKey& key, const std::function<Difference()>& check);

namespace detail {

// What an argument adds to a call's key (`row_statistic`: a tensor whose last dimension is
// the length, e.g. den (batch, heads, length): only whether it is given counts).
inline void add_to_key(ConfigKey& key, const Tensor& t, bool row_statistic) {
  if (!t.defined() || t.dtype() != DType::bf16) {
    key.parts[key.count++] = t.defined() ? -2 : -1;
  } else if (row_statistic) {
    key.parts[key.count++] = -3;
  } else {
    key.parts[key.count++] = t.shape().back();
    if (t.dim() == 3) key.parts[key.count++] = t.shape()[1];  // omega (heads, features, width): the features
  }
}
inline void add_to_key(ConfigKey& key, bool b, bool) { key.parts[key.count++] = b; }
inline void add_to_key(ConfigKey& key, std::int64_t n, bool) { key.parts[key.count++] = n; }
inline void add_to_key(ConfigKey& key, double, bool) { key.parts[key.count++] = 0; }

// An argument as the f32 kernel takes it: bf16 tensors widened (inputs) or given f32 scratch
// (outputs, rounded back by finish() when `write_back`); everything else as it is.
template <class Param>
struct Widened {
  Param value;
  explicit Widened(Param v) : value(v) {}
  Param get() { return value; }
  void finish(bool) {}
  void add_difference(std::vector<Difference>&, int) {}
};
template <>
struct Widened<const Tensor&> {
  Tensor value;
  explicit Widened(const Tensor& t) : value(t.defined() && t.dtype() == DType::bf16 ? t.to(DType::f32) : t) {}
  const Tensor& get() { return value; }
  void finish(bool) {}
  void add_difference(std::vector<Difference>&, int) {}
};
template <>
struct Widened<Tensor&> {
  Tensor& target;
  Tensor scratch;
  explicit Widened(Tensor& t)
      : target(t), scratch(t.defined() ? Tensor::empty(t.shape(), t.dtype() == DType::bf16 ? DType::f32 : t.dtype(),
                                                       t.device())
                                       : Tensor()) {}
  Tensor& get() { return scratch; }
  void finish(bool write_back) {
    if (write_back && target.defined()) target.copy_(scratch.to(target.dtype()));
  }
  void add_difference(std::vector<Difference>& diffs, int index) {
    if (target.defined()) diffs.push_back(compare("argument " + std::to_string(index), target, scratch));
  }
};

template <class... Params, class... Args, std::size_t... I>
std::vector<Difference> run_reference(void (*reference)(Params...), bool write_back, std::index_sequence<I...>,
                                      Args&&... args) {
  std::tuple<Widened<Params>...> widened{Widened<Params>(args)...};
  reference(std::get<I>(widened).get()...);
  std::vector<Difference> diffs;
  (std::get<I>(widened).finish(write_back), ...);
  if (!write_back) (std::get<I>(widened).add_difference(diffs, static_cast<int>(I)), ...);
  return diffs;
}

}  // namespace detail

// The arguments (by index, the queries 0) that are row statistics (see add_to_key), as a mask.
constexpr std::uint32_t row_statistics(std::initializer_list<int> indices) {
  std::uint32_t mask = 0;
  for (int i : indices) mask |= std::uint32_t{1} << i;
  return mask;
}

// Runs the bf16 kernel `fast`, or its f32 twin `reference` where the check found `fast`
// wrong (see above); `op` names it. The first argument is the queries, (batch, length, heads,
// width): they give the key its device and length; `row_stats` marks the arguments whose
// last dimension is the length (row_statistics()).
template <class Queries, class... Params>
void run(const char* op, std::uint32_t row_stats, void (*fast)(Queries, Params...),
         void (*reference)(Queries, Params...), const Tensor& queries, std::type_identity_t<Params>... args) {
  static_assert(std::is_same_v<Queries, const Tensor&>, "bf16_check::run: the first argument must be the queries");
  static_assert(2 * (sizeof...(Params) + 1) <= ConfigKey::kMaxParts, "bf16_check::run: more arguments than a key holds");
  ConfigKey key{op, queries.device().index, length_class(queries.shape().at(1))};
  int index = 0;
  detail::add_to_key(key, queries, false);
  (detail::add_to_key(key, args, (row_stats >> ++index) & 1), ...);
  bool written = false;  // the check ran `fast` into the outputs
  const bool bf16 = use_bf16(key, [&] {
    fast(queries, args...);
    written = true;
    return worst(detail::run_reference(reference, false, std::index_sequence_for<Queries, Params...>{}, queries,
                                       args...));
  });
  if (bf16 && !written) fast(queries, args...);
  if (!bf16) detail::run_reference(reference, true, std::index_sequence_for<Queries, Params...>{}, queries, args...);
}

}  // namespace dark::cuda::bf16_check
