// darkformer_bench_gpu_attention: forward + backward time and peak memory of the attention
// kernels on a GPU against sequence length: softmax (our flash kernel) and the three
// random-feature kinds (the fused random_feature_attention), built as the model builds them
// (attention::make_factory), B x L tokens, H heads of dimension D, random N(0, 1) q, k, v that
// require grad, one call = forward + backward(out, dout). The darkformer side of
// scripts/bench_gpu.sh (bench/torch_gpu.py times PyTorch's scaled_dot_product_attention on
// the same shapes). A benchmark, not a test.
//
// Per configuration: --warmup calls, then --reps calls timed together between two device
// synchronisations, repeated --rounds times; the median round is reported. Peak memory: the
// caching allocator's peak during one call beyond what was in use before it. Softmax
// TFLOP/s counts the causal products as FlashAttention does: forward 2 B H L^2 D (half of
// the non-causal 4 B H L^2 D), backward 2.5 times that.
//
// Output: one JSON object per line on stdout ({kind, m, d, len, batch, heads, dtype, ms,
// tflops, peak_mib}), progress on stderr. Configurations predicted to exceed --budget-s
// per call (from the previous length: quadratic for softmax, linear otherwise) are skipped
// with a line {"skipped": ...}.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/median.h"
#include "attention/factory.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/backend.h"
#include "nn/attention_kernel.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Args {
  std::vector<std::string> kinds = {"softmax", "performer", "lfk", "darkformer"};
  std::vector<std::int64_t> lens = {1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};
  std::vector<std::int64_t> dims = {64, 128};
  std::vector<std::int64_t> features = {64, 256};
  std::int64_t tokens = 131072;  // batch = max(1, tokens / len)
  std::int64_t heads = 8;
  std::string dtype = "bf16";
  int warmup = 2, reps = 5, rounds = 3;
  double budget_s = 5.0;
};

[[noreturn]] void usage(int code) {
  (code ? std::cerr : std::cout)
      << "usage: darkformer_bench_gpu_attention [flags]\n"
         "  --kinds LIST      softmax,performer,lfk,darkformer (default all)\n"
         "  --lens LIST       sequence lengths (default 1024 ... 131072)\n"
         "  --dims LIST       head dimensions (default 64,128)\n"
         "  --features LIST   random features m (default 64,256)\n"
         "  --tokens N        tokens per call: batch = max(1, N / len) (default 131072)\n"
         "  --heads H         heads (default 8)\n"
         "  --dtype T         bf16 or f32 (default bf16)\n"
         "  --warmup N --reps N --rounds N   timing (default 2, 5, 3)\n"
         "  --budget-s S      skip configurations predicted to take longer per call (default 5)\n";
  std::exit(code);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<std::int64_t> integers(const std::string& s) {
  std::vector<std::int64_t> out;
  for (const std::string& item : split(s)) out.push_back(std::stoll(item));
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(2);
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") usage(0);
    else if (arg == "--kinds") a.kinds = split(value());
    else if (arg == "--lens") a.lens = integers(value());
    else if (arg == "--dims") a.dims = integers(value());
    else if (arg == "--features") a.features = integers(value());
    else if (arg == "--tokens") a.tokens = std::stoll(value());
    else if (arg == "--heads") a.heads = std::stoll(value());
    else if (arg == "--dtype") a.dtype = value();
    else if (arg == "--warmup") a.warmup = std::stoi(value());
    else if (arg == "--reps") a.reps = std::stoi(value());
    else if (arg == "--rounds") a.rounds = std::stoi(value());
    else if (arg == "--budget-s") a.budget_s = std::stod(value());
    else {
      std::cerr << "darkformer_bench_gpu_attention: unknown flag '" << arg << "'\n";
      usage(2);
    }
  }
  if (a.dtype != "bf16" && a.dtype != "f32") usage(2);
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dark;
  const Args args = parse(argc, argv);
  if (!cuda_available()) {
    std::cerr << "darkformer_bench_gpu_attention: no GPU\n";
    return 1;
  }
  const Device dev = Device::cuda(0);
  const DType dtype = args.dtype == "bf16" ? DType::bf16 : DType::f32;
  DeviceBackend& backend = backend_for(DeviceType::cuda);
  CachingAllocator& alloc = allocator_for(dev);
  std::map<std::string, double> last_ms, last_len;  // for the budget prediction
  try {
    for (const std::int64_t d : args.dims)
      for (const std::string& kind : args.kinds)
        for (const std::int64_t m : kind == "softmax" ? std::vector<std::int64_t>{0} : args.features)
          for (const std::int64_t len : args.lens) {
            const std::int64_t batch = std::max<std::int64_t>(1, args.tokens / len), h = args.heads;
            const std::string key = kind + "/" + std::to_string(m) + "/" + std::to_string(d);
            // Work grows as batch L^2 for softmax, batch L otherwise (batch = tokens / L).
            const auto work = [&](double l) {
              const double b = std::max<double>(1.0, std::floor(static_cast<double>(args.tokens) / l));
              return b * l * (kind == "softmax" ? l : 1.0);
            };
            if (last_ms.count(key) && last_ms[key] * work(len) / work(last_len[key]) / 1e3 > args.budget_s) {
              std::cout << json{{"skipped", key}, {"len", len}, {"reason", "predicted over --budget-s"}}.dump() << std::endl;
              continue;
            }
            attention::AttentionConfig c;
            c.kind = parse_enum<attention::Kind>(kind, "kind");
            c.num_features = static_cast<int>(std::max<std::int64_t>(m, 1));
            auto kernel = attention::make_factory(c)(nn::AttentionShape{h, h, d, 0, DType::f32});
            kernel->to(dev);
            kernel->set_compute_dtype(dtype);
            kernel->train(true);
            Tensor q = Tensor::randn({batch, len, h, d}, 1, 0, DType::f32, dev).to(dtype).set_requires_grad(true);
            Tensor k = Tensor::randn({batch, len, h, d}, 1, 1, DType::f32, dev).to(dtype).set_requires_grad(true);
            Tensor v = Tensor::randn({batch, len, h, d}, 1, 2, DType::f32, dev).to(dtype).set_requires_grad(true);
            const Tensor dout = Tensor::randn({batch, len, h, d}, 1, 3, DType::f32, dev).to(dtype);
            auto call = [&] {
              backward(kernel->forward(q, k, v), dout);
              q.zero_grad(), k.zero_grad(), v.zero_grad();
            };
            for (int i = 0; i < args.warmup; ++i) call();
            backend.synchronize(0);
            alloc.reset_peak();
            const std::size_t before = alloc.stats().bytes_in_use;
            call();
            backend.synchronize(0);
            const double peak_mib = static_cast<double>(alloc.stats().peak_bytes_in_use - before) / (1 << 20);
            std::vector<double> rounds;
            for (int r = 0; r < args.rounds; ++r) {
              const auto t0 = Clock::now();
              for (int i = 0; i < args.reps; ++i) call();
              backend.synchronize(0);
              rounds.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / args.reps);
            }
            const double ms = dark::median(rounds);
            const double flops = kind == "softmax" ? 7.0 * batch * h * static_cast<double>(len) * len * d : 0.0;
            json row = {{"kind", kind},   {"m", m},     {"d", d},           {"len", len},
                        {"batch", batch}, {"heads", h}, {"dtype", args.dtype}, {"ms", ms},
                        {"peak_mib", peak_mib}};
            if (flops > 0) row["tflops"] = flops / (ms * 1e-3) / 1e12;
            std::cout << row.dump() << std::endl;
            std::cerr << key << " L " << len << ": " << ms << " ms\n";
            last_ms[key] = ms, last_len[key] = static_cast<double>(len);
          }
  } catch (const std::exception& e) {
    std::cerr << "darkformer_bench_gpu_attention: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
