// darkformer_bench_train: times full training steps of a config's model on random token
// batches (no data files) and reports tokens/s and peak memory. It is the darkformer side
// of scripts/bench_train.sh, which runs bench/torch_train.py on the same model for the
// PyTorch side; each side runs in its own process so that peak RSS does not mix.
//
// One step is exactly the work of train/trainer.cpp's loop: learning rate from the
// schedule, zero_grad, model->loss(batch), backward, loss.item(), the global gradient norm,
// clipping when above optimizer.grad_clip, optimizer.step(lr). Batches are (batch, seq_len
// + 1) i32 tokens drawn with Philox (seed, stream = step), so every step sees new tokens.
// After --warmup untimed steps, --steps steps are timed one by one; the reported step time
// is their median, tokens/s = batch * seq_len / median.
//
// Output: a human-readable summary on stderr and one JSON object on stdout (keys: side,
// threads, steps, median_step_ms, min_step_ms, max_step_ms, tokens_per_s, peak_rss_mb,
// base_rss_mb, alloc_peak_mb, phases_ms {forward, backward, grad_norm, optimizer}, ...).
// --set training.device=cuda (and training.precision=bf16) times the same steps on a GPU
// (scripts/bench_gpu.sh); alloc_peak_mb is then the device's caching allocator peak.
// --print-model prints the resolved model/training shape as JSON and exits: the PyTorch
// side reads it so that both sides train the same model.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/kernel_profile.h"
#include "core/median.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "autograd/weights.h"
#include "core/allocator.h"
#include "core/philox.h"
#include "nn/optim.h"
#include "nn/parameter_buffer.h"
#include "nn/schedule.h"
#include "train/config.h"
#include "train/device_setting.h"
#include "train/model_builder.h"
#include "train/attention_state.h"
#include "train/step_graph.h"

namespace {
using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace fs = std::filesystem;

// The model small.json will describe (used when configs/small.json does not exist).
const char* const kDefaultSmall = R"({
  "model": {"d_model": 256, "n_layers": 4, "n_heads": 4, "n_kv_heads": 4, "mlp": "swiglu",
            "vocab_size": 8192, "tie_embeddings": true},
  "attention": {"kind": "softmax"},
  "data": {"seq_len": 256, "vocab_size": 8192},
  "optimizer": {"name": "adamw"},
  "training": {"batch_size": 16}
})";

struct Args {
  std::string config;  // "" = configs/small.json if present, else kDefaultSmall
  std::vector<std::string> overrides;
  int steps = 20, warmup = 3;
  int threads = 0;  // 0 = leave OpenMP's default
  int profile = 0;  // profiled steps after the timed ones (0: none)
  bool print_model = false;
};

[[noreturn]] void usage(int code) {
  (code ? std::cerr : std::cout)
      << "usage: darkformer_bench_train [flags]\n"
         "Times full training steps (forward, backward, grad norm, AdamW) of a config's model on\n"
         "random token batches; prints a summary on stderr and one JSON object on stdout.\n\n"
         "  --config PATH   run config (default: configs/small.json when it exists, else the\n"
         "                  built-in small model: d_model 256, 4 layers, 4 heads, vocab 8192,\n"
         "                  seq_len 256, batch 16)\n"
         "  --set K=V       config override, as `darkformer train --set` (repeatable)\n"
         "  --steps N       timed steps (default 20)\n"
         "  --warmup N      untimed steps first (default 3)\n"
         "  --threads N     OpenMP threads (default: OMP_NUM_THREADS / all cores)\n"
         "  --profile N     after the timed steps, N more with every kernel timed (on a GPU by\n"
         "                  CUDA events, no synchronisation between kernels): a table of the\n"
         "                  device time per step by phase and kernel on stderr, \"profile\" in the JSON\n"
         "  --print-model   print the resolved model as JSON and exit\n";
  std::exit(code);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(2);
      return argv[++i];
    };
    auto integer = [&](int lo) {
      const std::string v = value();
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || n < lo) {
        std::cerr << "darkformer_bench_train: " << arg << " wants an integer >= " << lo << ", got '" << v << "'\n";
        std::exit(2);
      }
      return static_cast<int>(n);
    };
    if (arg == "--help" || arg == "-h") usage(0);
    else if (arg == "--config") a.config = value();
    else if (arg == "--set") a.overrides.push_back(value());
    else if (arg == "--steps") a.steps = integer(1);
    else if (arg == "--warmup") a.warmup = integer(0);
    else if (arg == "--threads") a.threads = integer(1);
    else if (arg == "--profile") a.profile = integer(0);
    else if (arg == "--print-model") a.print_model = true;
    else {
      std::cerr << "darkformer_bench_train: unknown flag '" << arg << "'\n";
      usage(2);
    }
  }
  return a;
}

dark::train::RunConfig load(const Args& a, std::string& source) {
  using namespace dark::train;
  json doc;
  std::string stem = "small";
  if (!a.config.empty()) {
    doc = read_config_json(a.config);
    stem = fs::path(a.config).stem().string();
    source = a.config;
  } else if (fs::exists("configs/small.json")) {
    doc = read_config_json("configs/small.json");
    source = "configs/small.json";
  } else {
    doc = json::parse(kDefaultSmall);
    source = "built-in small model (configs/small.json not found)";
  }
  for (const auto& o : a.overrides) apply_override(doc, o);
  RunConfig c = parse_config(doc, stem);
  // As prepare_data_for would: 0 means the tokenizer's size, which is data.vocab_size.
  if (c.model.vocab_size == 0) c.model.vocab_size = c.data.vocab_size;
  validate_config(c);
  return c;
}

double rss_mb() {  // peak RSS so far (ru_maxrss is KiB on Linux)
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// (B, T + 1) i32 tokens in [0, vocab), Philox keyed by (seed, stream = step).
dark::Tensor random_batch(std::int64_t B, std::int64_t T1, std::int64_t vocab, std::uint64_t seed, std::uint64_t step) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(B * T1));
  for (std::size_t i = 0; i < ids.size(); i += 4) {
    const auto blk = dark::philox::block(seed, step, i / 4);
    for (std::size_t l = 0; l < 4 && i + l < ids.size(); ++l)
      ids[i + l] = static_cast<std::int32_t>(blk.v[l] % static_cast<std::uint32_t>(vocab));
  }
  return dark::Tensor::from_vector(ids, {B, T1});
}

// The profile as JSON rows (ms, calls, tensor bytes and matmul FLOPs per step), and as a
// table on stderr: device time per step by phase and kernel, how much of the step's wall time
// the kernels fill (on a GPU the rest is host work and launch gaps the device waits through),
// and each kernel's rates: GB/s of the tensors it is handed (a one-pass kernel's bandwidth;
// a lower bound for tiled ones) and TFLOP/s for matmul.
json profile_json(const std::vector<dark::KernelProfile::Row>& rows, int steps, double median_step_s) {
  double kernels_ms = 0;
  for (const auto& r : rows) kernels_ms += r.ms / steps;
  const double step_ms = median_step_s * 1e3;
  std::fprintf(stderr, "  kernel profile over %d steps (median step %.2f ms; kernels %.2f ms = %.0f%% of it):\n", steps,
               step_ms, kernels_ms, 100 * kernels_ms / step_ms);
  std::fprintf(stderr, "    %-15s %-36s %10s %10s %7s %9s %9s %8s\n", "phase", "kernel", "calls/step", "ms/step", "% step",
               "GB/step", "GB/s", "TFLOP/s");
  json out = json::array();
  for (const auto& r : rows) {
    const double ms = r.ms / steps, calls = static_cast<double>(r.calls) / steps;
    const double gb = r.bytes / steps / 1e9, tflop = r.flops / steps / 1e12;
    const double gb_per_s = ms > 0 ? gb / (ms / 1e3) : 0, tflop_per_s = ms > 0 ? tflop / (ms / 1e3) : 0;
    std::fprintf(stderr, "    %-15s %-36s %10.1f %10.3f %6.1f%% %9.3f %9.1f", r.pass.empty() ? "(none)" : r.pass.c_str(),
                 r.kernel.c_str(), calls, ms, 100 * ms / step_ms, gb, gb_per_s);
    if (r.flops > 0) std::fprintf(stderr, " %8.1f", tflop_per_s);
    std::fprintf(stderr, "\n");
    out.push_back({{"phase", r.pass}, {"kernel", r.kernel}, {"device", dark::device_type_name(r.device)},
                   {"calls_per_step", calls}, {"ms_per_step", ms}, {"gb_per_step", gb}, {"tflop_per_step", tflop}});
  }
  return {{"steps", steps}, {"median_step_ms", step_ms}, {"kernels_ms_per_step", kernels_ms}, {"rows", out}};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dark;
  const Args args = parse_args(argc, argv);
  try {
    std::string source;
    const train::RunConfig config = load(args, source);
    const auto& m = config.model;
    const std::int64_t B = config.training.batch_size, T = config.data.seq_len, V = m.vocab_size;
    json model_json = {{"vocab_size", V},
                       {"precision", std::string(dark::enum_name(config.training.precision))},
                       {"d_model", m.d_model},
                       {"n_layers", m.n_layers},
                       {"n_heads", m.n_heads},
                       {"n_kv_heads", m.n_kv_heads},
                       {"d_ff", m.d_ff},
                       {"mlp", std::string(dark::enum_name(m.mlp))},
                       {"rope_theta", m.rope_theta},
                       {"norm_eps", m.norm_eps},
                       {"tie_embeddings", m.tie_embeddings},
                       {"init_std", m.init_std},
                       {"attention", std::string(dark::enum_name(config.attention.kind))},
                       {"batch_size", B},
                       {"seq_len", T},
                       {"grad_accum", config.training.grad_accum},
                       {"optimizer", std::string(dark::enum_name(config.optimizer.name))},
                       {"lr", config.optimizer.lr},
                       {"betas", config.optimizer.betas},
                       {"eps", config.optimizer.eps},
                       {"weight_decay", config.optimizer.weight_decay},
                       {"no_decay", config.optimizer.no_decay},
                       {"grad_clip", config.optimizer.grad_clip},
                       {"seed", config.seed}};
    if (args.print_model) {
      std::cout << model_json.dump() << "\n";
      return 0;
    }
    if (args.threads > 0) omp_set_num_threads(args.threads);
    const int threads = omp_get_max_threads();
    const double base_rss = rss_mb();

    // ---- as trainer.cpp sets up a run (training.device, precision, activation checkpointing) ----
    const Device device = train::resolve_device(config.training.device);
    std::unique_ptr<nn::CausalLM> model = train::build_model(config);
    model->to(device);
    model->activation_checkpointing = config.training.activation_checkpointing;
    const bool bf16 = config.training.precision == train::Precision::bf16;
    DARK_CHECK(!bf16 || device.is_cuda(), "training.precision bf16 needs training.device cuda");
    if (bf16) model->set_compute_dtype(DType::bf16);
    nn::ParameterBuffer params(model->named_parameters());
    nn::Optimizer optimizer(params, config.optimizer);
    model->train(true);
    const int accum = config.training.grad_accum;
    DARK_CHECK(!config.training.cuda_graph || device.is_cuda(), "training.cuda_graph needs training.device cuda");
    std::unique_ptr<train::StepGraph> graph;
    if (config.training.cuda_graph) graph = std::make_unique<train::StepGraph>(device);

    std::vector<double> step_s, fwd_s, bwd_s, norm_s, opt_s;
    double last_loss = 0, first_loss = 0;
    const int total = args.warmup + args.steps;
    // One training step; the phases are named for a kernel profile (ignored without one).
    auto run_step = [&](int step) {
      // Batches are made outside the timed region, like the loader's mmap read would be cheap.
      std::vector<Tensor> batches;
      for (int micro = 0; micro < accum; ++micro)
        batches.push_back(
            random_batch(B, T + 1, V, config.seed + 12345, static_cast<std::uint64_t>(step * accum + micro)).to(device));
      const auto t0 = Clock::now();
      const double lr = nn::learning_rate_at(config.schedule, config.optimizer.lr, step, config.training.steps);
      params.zero_grad();
      double loss_value = 0, fwd = 0, bwd = 0;
      std::unique_ptr<WeightCopies> weight_copies;  // as train_step: every weight cast once per step
      if (bf16 && !graph) {
        const ProfilePass pass("forward");
        weight_copies = params.cast_values(DType::bf16);
      }
      if (graph) {
        // training.cuda_graph: the passes as train_step runs them (train/step_graph.h); the
        // forward phase is then forward and backward together, read back once.
        const auto f0 = Clock::now();
        const std::vector<std::int64_t> epochs = train::redrawing_feature_epochs(*model);
        std::vector<std::uint64_t> dropout_steps;
        for (int micro = 0; micro < accum; ++micro) dropout_steps.push_back(step * accum + micro);
        auto passes = [&](const std::vector<Tensor>& inputs, const std::vector<nn::DropoutKey>& dropout) {
          // The casts inside the passes: a graph must redo them from each step's weights.
          const auto copies = bf16 ? params.cast_values(DType::bf16) : nullptr;
          Tensor loss_sum;
          for (int micro = 0; micro < accum; ++micro) {
            Tensor loss = model->loss(inputs[micro], dropout[micro]);
            if (accum > 1) loss = mul_scalar(loss, 1.0 / accum);
            backward(loss);
            const Tensor value = loss.detach().to(DType::f64);
            loss_sum = loss_sum.defined() ? add(loss_sum, value) : value;
          }
          return loss_sum;
        };
        Tensor loss_sum;
        if (graph->applies(epochs, KernelProfile::active())) {
          loss_sum = graph->launch(batches, dropout_steps, epochs, passes);
        } else {
          graph->eager_step_ran(epochs);
          const ProfilePass pass("forward");
          loss_sum = passes(batches, train::host_dropout_keys(dropout_steps));
        }
        loss_value = loss_sum.item();
        fwd = std::chrono::duration<double>(Clock::now() - f0).count();
      }
      for (int micro = 0; micro < accum && !graph; ++micro) {
        const auto f0 = Clock::now();
        Tensor loss;
        {
          const ProfilePass pass("forward");
          loss = model->loss(batches[micro], static_cast<std::uint64_t>(step * accum + micro));
          if (accum > 1) loss = mul_scalar(loss, 1.0 / accum);
        }
        const auto f1 = Clock::now();
        {
          const ProfilePass pass("backward");
          backward(loss);
        }
        loss_value += loss.item();  // on a GPU: waits for the micro-batch (the phase times are then real)
        const auto f2 = Clock::now();
        fwd += std::chrono::duration<double>(f1 - f0).count();
        bwd += std::chrono::duration<double>(f2 - f1).count();
      }
      weight_copies.reset();  // before the update changes the values
      const auto n0 = Clock::now();
      double grad_norm = 0;
      {
        const ProfilePass pass("grad_norm_clip");
        grad_norm = params.grad_norm();
        DARK_CHECK(std::isfinite(loss_value) && std::isfinite(grad_norm), "non-finite loss ", loss_value,
                   " or gradient norm ", grad_norm, " at step ", step);
        if (config.optimizer.grad_clip > 0 && grad_norm > config.optimizer.grad_clip)
          params.scale_grads(config.optimizer.grad_clip / grad_norm);
      }
      const auto o0 = Clock::now();
      {
        const ProfilePass pass("optimizer");
        optimizer.step(lr);
      }
      const auto t1 = Clock::now();
      if (step == 0) first_loss = loss_value;
      last_loss = loss_value;
      if (step >= args.warmup && step < total) {  // the profiled steps are not timed here
        step_s.push_back(std::chrono::duration<double>(t1 - t0).count());
        fwd_s.push_back(fwd);
        bwd_s.push_back(bwd);
        norm_s.push_back(std::chrono::duration<double>(o0 - n0).count());
        opt_s.push_back(std::chrono::duration<double>(t1 - o0).count());
      }
      return std::chrono::duration<double>(t1 - t0).count();
    };
    for (int step = 0; step < total; ++step) run_step(step);
    // The profiled steps, after the timed ones: recording events costs a little per kernel.
    json profile = nullptr;
    if (args.profile > 0) {
      std::vector<double> profiled_s;
      KernelProfile kernel_profile;
      for (int step = total; step < total + args.profile; ++step) profiled_s.push_back(run_step(step));
      profile = profile_json(kernel_profile.finish(), args.profile, dark::median(profiled_s));
    }

    const double med = dark::median(step_s);
    const double tok_s = static_cast<double>(B * T * accum) / med;
    const AllocatorStats st = allocator_for(device).stats();
    json out = {{"side", "darkformer"},
                {"device", device.to_string()},
                {"precision", std::string(dark::enum_name(config.training.precision))},
                {"threads", threads},
                {"steps", args.steps},
                {"warmup", args.warmup},
                {"median_step_ms", med * 1e3},
                {"min_step_ms", *std::min_element(step_s.begin(), step_s.end()) * 1e3},
                {"max_step_ms", *std::max_element(step_s.begin(), step_s.end()) * 1e3},
                {"tokens_per_s", tok_s},
                {"peak_rss_mb", rss_mb()},
                {"base_rss_mb", base_rss},
                {"alloc_peak_mb", static_cast<double>(st.peak_bytes_in_use) / (1 << 20)},
                // The cache never shrinks, so what it holds after the last step is its peak.
                {"alloc_held_mb", static_cast<double>(st.bytes_in_use + st.bytes_cached) / (1 << 20)},
                {"alloc_cached_mb", static_cast<double>(st.bytes_cached) / (1 << 20)},
                {"alloc_system_allocs", st.system_allocs},
                {"parameters", model->num_parameters()},
                {"first_loss", first_loss},
                {"last_loss", last_loss},
                {"cuda_graph", config.training.cuda_graph},  // then phases_ms.forward is forward + backward
                {"phases_ms",
                 {{"forward", dark::median(fwd_s) * 1e3},
                  {"backward", dark::median(bwd_s) * 1e3},
                  {"grad_norm_clip", dark::median(norm_s) * 1e3},
                  {"optimizer", dark::median(opt_s) * 1e3}}},
                {"config", source},
                {"model", model_json}};
    if (!profile.is_null()) out["profile"] = profile;
    std::fprintf(stderr,
                 "darkformer: %s, %lld params, batch %lld x seq %lld, %d threads\n"
                 "  step median %.1f ms [%.1f..%.1f] over %d steps -> %.0f tokens/s; loss %.4f -> %.4f\n"
                 "  phases (median ms): forward %.1f | backward %.1f | grad norm+clip %.2f | optimizer %.2f\n"
                 "  peak RSS %.1f MB (%.1f MB before the model); allocator peak in use %.1f MB, held (in use + "
                 "cached) %.1f MB, %zu system allocs\n",
                 source.c_str(), static_cast<long long>(model->num_parameters()), static_cast<long long>(B),
                 static_cast<long long>(T), threads, med * 1e3, out["min_step_ms"].get<double>(),
                 out["max_step_ms"].get<double>(), args.steps, tok_s, first_loss, last_loss, dark::median(fwd_s) * 1e3,
                 dark::median(bwd_s) * 1e3, dark::median(norm_s) * 1e3, dark::median(opt_s) * 1e3, out["peak_rss_mb"].get<double>(),
                 base_rss, out["alloc_peak_mb"].get<double>(), out["alloc_held_mb"].get<double>(), st.system_allocs);
    std::cout << out.dump() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "darkformer_bench_train: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
