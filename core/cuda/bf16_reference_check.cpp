// The verdicts of the bf16 kernels' checks against a reference: see bf16_reference_check.h.
#include "core/cuda/bf16_reference_check.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cuda/once_verdicts.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace dark::cuda::bf16_check {
namespace {

constexpr double kElementBound = 5e-2, kRelativeL2Bound = 2e-2;  // tests/test_gpu_kernels.cpp's bf16 bounds

}  // namespace

Difference compare(const std::string& output, const Tensor& got, const Tensor& want) {
  const std::vector<double> x = got.to(Device::cpu()).to(DType::f64).to_vector<double>();
  const std::vector<double> y = want.to(Device::cpu()).to(DType::f64).to_vector<double>();
  Difference d;
  d.output = output;
  double err2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double err = x[i] == y[i] ? 0.0 : std::fabs(x[i] - y[i]);  // equal infinities agree
    if (!(err <= kElementBound + kElementBound * std::fabs(y[i])) && d.first_beyond.empty())
      d.first_beyond = str(output, "[", i, "]: ", x[i], " against ", y[i]);
    if (std::isfinite(y[i])) ref2 += y[i] * y[i];
    d.max_abs = std::isnan(err) || err > d.max_abs ? err : d.max_abs;
    err2 += err * err;
  }
  d.relative_l2 = std::sqrt(err2 / std::max(ref2, 1e-300));
  d.within = d.first_beyond.empty() && d.relative_l2 <= kRelativeL2Bound;
  return d;
}

Difference worst(const std::vector<Difference>& diffs) {
  Difference most;
  for (const Difference& d : diffs)
    if (d.within < most.within || (d.within == most.within && d.relative_l2 >= most.relative_l2)) most = d;
  return most;
}

std::int64_t length_class(std::int64_t length) {
  std::int64_t c = 1;
  while (c < length) c *= 4;
  return c;
}

std::string ConfigKey::describe() const {
  std::string text = str(op, " on cuda:", device, ", length <= ", length_class, ":");
  for (int i = 0; i < count; ++i) {
    text += ' ';
    text += std::to_string(parts[i]);
  }
  return text;
}

std::string describe_bounds(const Difference& d) {
  return str(d.output, " max |diff| ", d.max_abs, ", relative L2 ", d.relative_l2, " (bounds: ", kElementBound, " + ",
             kElementBound, " |x| per element, ", kRelativeL2Bound, " relative L2; ",
             d.first_beyond.empty() ? std::string("beyond in relative L2") : "first beyond: " + d.first_beyond, ")");
}

bool use_bf16(const ConfigKey& key, const std::function<Difference()>& check) {
  static OnceVerdicts<ConfigKey> verdicts;
  if (const std::optional<bool> verdict = verdicts.find(key)) return *verdict;
  if (current_stream() != nullptr) {  // capturing a graph: nothing may be read back now
    static FirstTimes<ConfigKey> warned;
    if (warned.first(key))
      spdlog::warn("{}: the bf16 kernel's self-check cannot run inside a CUDA graph capture: the captured call falls "
                   "back to the f32 kernel ({})",
                   key.op, key.describe());
    return false;
  }
  return verdicts.get(key, [&] {
    const Difference d = check();
    if (!d.within)
      spdlog::error("{}: self-check failed: the bf16 (tensor-core) kernel differs from the f32 kernel on the same "
                    "inputs: {}: this process falls back to the f32 kernel for {}",
                    key.op, describe_bounds(d), key.describe());
    return d.within;
  });
}

}  // namespace dark::cuda::bf16_check
