// Whether a bf16 flash call may run the Hopper kernels: see flash_attention_sm90_guard.h.
#include "core/cuda/flash_attention_sm90_guard.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "core/cuda/bf16_reference_check.h"
#include "core/cuda/once_verdicts.h"
#include "core/cuda/stream.h"
#include "core/error.h"
#include "core/kernels.h"

namespace dark::cuda::flash {
namespace {

enum class Mode { check, on, off };

Mode mode() {
  const char* value = std::getenv("DARK_FLASH_SM90");
  if (value == nullptr || *value == '\0' || std::strcmp(value, "check") == 0) return Mode::check;
  if (std::strcmp(value, "on") == 0 || std::strcmp(value, "1") == 0) return Mode::on;
  if (std::strcmp(value, "off") == 0 || std::strcmp(value, "0") == 0) return Mode::off;
  throw Error(str("DARK_FLASH_SM90 is '", value, "': expected check (the default), on or off"));
}

// Set while the self-check runs a configuration one way and the other: its calls take this
// answer and nothing else.
thread_local std::optional<bool> forced_choice;
class ForcedChoice {
 public:
  explicit ForcedChoice(bool sm90) { forced_choice = sm90; }
  ~ForcedChoice() { forced_choice.reset(); }
  ForcedChoice(const ForcedChoice&) = delete;
  ForcedChoice& operator=(const ForcedChoice&) = delete;
};

std::string kernel_names(const Sm90Config& c) {
  return c.backward ? str("dq_sm90_kernel<", c.kd, "> / dkv_sm90_kernel<", c.kd, ">")
                    : str("forward_sm90_kernel<", c.kd, ">");
}

bool registers_fit(const Sm90Config& c) {
  bool fit = true;
  for (const KernelRegisters& k : c.backward ? backward_sm90_registers(c.kd) : forward_sm90_registers(c.kd))
    if (k.registers < k.needed) {
      spdlog::warn(
          "flash_attention: the sm_90 kernel {} starts with {} registers a thread, but its register split needs {} "
          "(setmaxnreg would wait for registers that never come): {} falls back to the mma.sync kernels",
          k.kernel, k.registers, k.needed, c.describe());
      fit = false;
    }
  return fit;
}

// The configuration's Hopper kernels against its mma.sync kernels on one small problem:
// the output that differs most (the first one beyond the bounds, if any).
bf16_check::Difference self_check(const Sm90Config& c) {
  constexpr std::int64_t kLen = 200, kWindow = 90;  // two query blocks and several key tiles, the last ones partial
  constexpr std::uint64_t kSeed = 0x5e1f;
  const Device dev = Device::cuda(c.device);
  auto random = [&](std::int64_t heads, std::uint64_t stream) {
    return Tensor::randn({1, kLen, heads, c.kd}, kSeed, stream, DType::f32, dev).to(DType::bf16);
  };
  const Tensor q = random(2, 0), k = random(1, 1), v = random(1, 2);
  Tensor mask;
  if (c.masked) {  // a hole and right padding
    std::vector<std::int32_t> real(kLen, 1);
    for (std::int64_t s = 0; s < kLen; ++s) real[s] = (s >= 50 && s < 60) || s >= kLen - 13 ? 0 : 1;
    mask = Tensor::from_vector(real, {1, kLen}).to(dev);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.kd));
  const std::int64_t window = c.windowed ? kWindow : 0;
  auto* forward = kernels::flash_attention_forward().find(DeviceType::cuda, DType::bf16);
  auto* backward = kernels::flash_attention_backward().find(DeviceType::cuda, DType::bf16);
  auto run_forward = [&](bool sm90) {
    const ForcedChoice choice(sm90);
    Tensor out = Tensor::empty(q.shape(), DType::bf16, dev), lse = Tensor::empty({1, 2, kLen}, DType::f32, dev);
    forward(q, k, v, mask, out, lse, c.causal, scale, window);
    return std::pair{out, lse};
  };
  const std::pair<Tensor, Tensor> reference = run_forward(false);
  const Tensor &out = reference.first, &lse = reference.second;
  std::vector<bf16_check::Difference> diffs;
  if (!c.backward) {
    const std::pair<Tensor, Tensor> hopper = run_forward(true);
    diffs = {bf16_check::compare("out", hopper.first, out), bf16_check::compare("lse", hopper.second, lse)};
  } else {
    const Tensor dout = random(2, 3);
    auto run_backward = [&](bool sm90) {
      const ForcedChoice choice(sm90);
      std::vector<Tensor> grads = {Tensor::empty(q.shape(), DType::bf16, dev), Tensor::empty(k.shape(), DType::bf16, dev),
                                   Tensor::empty(v.shape(), DType::bf16, dev)};
      backward(q, k, v, mask, out, lse, dout, Tensor(), grads[0], grads[1], grads[2], c.causal, scale, window,
               /*accumulate=*/false);
      return grads;
    };
    const std::vector<Tensor> want = run_backward(false), got = run_backward(true);
    diffs = {bf16_check::compare("dq", got[0], want[0]), bf16_check::compare("dk", got[1], want[1]),
             bf16_check::compare("dv", got[2], want[2])};
  }
  return bf16_check::worst(diffs);
}

bool agrees(const Sm90Config& c) {
  const auto start = std::chrono::steady_clock::now();
  const bf16_check::Difference d = self_check(c);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!d.within) {
    spdlog::error(
        "flash_attention: self-check failed: the sm_90 kernels {} ({}) differ from the mma.sync kernels on a small "
        "problem: {}: this process falls back to the mma.sync kernels for {}",
        kernel_names(c), c.describe(), bf16_check::describe_bounds(d), c.describe());
    return false;
  }
  spdlog::debug("flash_attention: sm_90 self-check of {} passed in {:.1f} ms: {}", c.describe(), ms,
                bf16_check::describe_bounds(d));
  return true;
}

}  // namespace

std::string Sm90Config::describe() const {
  return str(backward ? "backward" : "forward", ", d ", kd, causal ? ", causal" : "", windowed ? ", window" : "",
             masked ? ", key mask" : "");
}

bool sm90_allowed(const Sm90Config& config) {
  if (forced_choice) return *forced_choice;
  const Mode m = mode();
  if (m == Mode::off) return false;
  // Reached once per configuration; a self-check runs GPU work, without a lock that would
  // hold up other threads' configurations (once_verdicts.h).
  static OnceVerdicts<Sm90Config> fits, agreements;
  if (!fits.get(config, [&] { return registers_fit(config); })) return false;
  if (m == Mode::on) return true;
  if (const std::optional<bool> agreed = agreements.find(config)) return *agreed;
  if (current_stream() != nullptr) {  // capturing a graph: nothing may be read back now
    static FirstTimes<Sm90Config> warned;
    if (warned.first(config))
      spdlog::warn("flash_attention: {} is first met inside a CUDA graph capture, where the sm_90 self-check cannot "
                   "run: the captured call falls back to the mma.sync kernels",
                   config.describe());
    return false;
  }
  return agreements.get(config, [&] { return agrees(config); });
}

}  // namespace dark::cuda::flash
