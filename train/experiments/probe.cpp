// The attention probe (see probe.h).
#include "train/experiments/probe.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "attention/darkformer_attention.h"
#include "attention/factory.h"
#include "attention/lfk_attention.h"
#include "attention/random_feature_attention.h"
#include "attention/softmax_attention.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "data/loader.h"
#include "train/model_builder.h"
#include "train/progress.h"
#include "train/swap/attention_error.h"
#include "train/swap/kernel_scope.h"

namespace dark::experiments {

namespace {

using attention::AttentionConfig;
using attention::Kind;

// Runs `batches` (B, T + 1) token batches through the model and returns, per layer, the
// attention inputs of every batch. The model's kernels are restored afterwards, also when a
// forward pass throws.
std::vector<std::vector<train::RecordingKernel::Inputs>> record_attention_inputs(nn::CausalLM& model,
                                                                                 const std::vector<Tensor>& batches) {
  train::KernelScope<train::RecordingKernel> scope(model, train::every_layer(model));
  for (const Tensor& tokens : batches) model.forward(core::slice(tokens, 1, 0, tokens.size(1) - 1).contiguous());
  std::vector<std::vector<train::RecordingKernel::Inputs>> out;
  for (train::RecordingKernel* recorder : scope.at) out.push_back(std::move(recorder->seen));
  return out;
}

// Errors of one (layer, method, m), split by head.
struct Accumulator {
  std::vector<std::vector<double>> monte_carlo, swap;  // per head
  std::vector<double> draw_means;                      // per draw: mean Monte Carlo error (one layer)
  explicit Accumulator(std::int64_t heads) : monte_carlo(heads), swap(heads) {}
  void add(std::vector<std::vector<double>>& to, const std::vector<double>& errors) {
    const std::size_t heads = to.size();
    for (std::size_t i = 0; i < errors.size(); ++i) to[i % heads].push_back(errors[i]);
  }
  // Every head's errors in one list.
  static std::vector<double> pooled(const std::vector<std::vector<double>>& per_head) {
    std::vector<double> all;
    for (const std::vector<double>& head : per_head) all.insert(all.end(), head.begin(), head.end());
    return all;
  }
};

double standard_deviation(const std::vector<double>& x) {
  if (x.size() < 2) return 0.0;
  const double mean = std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size());
  double s = 0;
  for (double v : x) s += (v - mean) * (v - mean);
  return std::sqrt(s / static_cast<double>(x.size() - 1));
}

// The probe's estimators for one layer: name, kernel settings, and how to finish the kernel
// (calibration, copying the checkpoint's M or W). A null `exact` means no fixed kernel.
struct Estimator {
  std::string name;
  std::unique_ptr<nn::AttentionKernel> linear, exact;
};

void copy_parameter(Tensor& to, const Tensor& from) {
  NoGradGuard no_grad;
  to.copy_(from);
}

std::vector<Estimator> estimators_for(const nn::AttentionShape& shape, const AttentionConfig& layer_settings,
                                      nn::AttentionKernel& trained, std::int64_t m, std::uint64_t seed,
                                      const std::vector<train::RecordingKernel::Inputs>& calibration, Device device) {
  AttentionConfig base;
  base.num_features = static_cast<int>(m);
  base.seed = seed;
  base.eps = layer_settings.eps;
  base.chunk_size = layer_settings.chunk_size;
  base.draw = layer_settings.draw;
  auto make = [&](Kind kind, attention::Mode mode, auto&& adjust) {
    AttentionConfig c = base;
    c.kind = kind;
    c.mode = mode;
    adjust(c);
    auto kernel = attention::make_factory(c)(shape);
    kernel->to(device);  // beside the trained model's attention inputs
    return kernel;
  };
  const auto none = [](AttentionConfig&) {};
  std::vector<Estimator> out;
  out.push_back({"performer", make(Kind::performer, attention::Mode::linear, none),
                 make(Kind::performer, attention::Mode::exact, none)});
  out.push_back({"darkformer_identity", make(Kind::darkformer, attention::Mode::linear, none),
                 make(Kind::darkformer, attention::Mode::exact, none)});
  // Calibrated estimators: whiten sets M, variance_optimal fits the proposal, both from the
  // calibration batches. A proposal that does not exist (an eigenvalue of Lambda >= 1/2) is
  // reported and skipped.
  const auto calibrated = [&](const std::string& name, Kind kind, auto&& adjust) {
    Estimator e{name, make(kind, attention::Mode::linear, adjust), nullptr};
    try {
      e.linear->begin_calibration();
      for (const auto& in : calibration) e.linear->forward(in.q, in.k, in.v);
      e.linear->end_calibration();
    } catch (const Error& error) {
      spdlog::warn("probe: {} skipped at m = {}: {}", name, m, error.what());
      return;
    }
    e.exact = make(kind, attention::Mode::exact, [&](AttentionConfig& c) {
      adjust(c);
      c.proposal = attention::Proposal::isotropic;  // exact mode draws nothing
    });
    if (kind == Kind::darkformer)
      copy_parameter(*dynamic_cast<attention::DarkformerAttention&>(*e.exact).matrix,
                     *dynamic_cast<attention::DarkformerAttention&>(*e.linear).matrix);
    out.push_back(std::move(e));
  };
  const auto whiten = [](AttentionConfig& c) { c.darkformer.init = attention::MatrixInit::whiten; };
  const auto optimal = [](AttentionConfig& c) { c.proposal = attention::Proposal::variance_optimal; };
  calibrated("darkformer_whiten", Kind::darkformer, whiten);
  calibrated("performer_var_opt", Kind::performer, optimal);
  calibrated("darkformer_whiten_var_opt", Kind::darkformer, [&](AttentionConfig& c) {
    whiten(c);
    optimal(c);
  });
  if (auto* learned = dynamic_cast<attention::DarkformerAttention*>(&trained)) {
    const auto same_m = [&](AttentionConfig& c) {
      c.darkformer.rank = layer_settings.darkformer.rank;
      c.darkformer.scope = layer_settings.darkformer.scope;
    };
    Estimator e{"darkformer_learned", make(Kind::darkformer, attention::Mode::linear, same_m),
                make(Kind::darkformer, attention::Mode::exact, same_m)};
    for (auto* k : {&*e.linear, &*e.exact})
      copy_parameter(*dynamic_cast<attention::DarkformerAttention&>(*k).matrix, *learned->matrix);
    out.push_back(std::move(e));
  }
  auto* trained_lfk = dynamic_cast<attention::LfkAttention*>(&trained);
  if (trained_lfk && trained_lfk->weight->size(1) == m) {
    Estimator e{"lfk_learned", make(Kind::lfk, attention::Mode::linear, none), nullptr};
    copy_parameter(*dynamic_cast<attention::LfkAttention&>(*e.linear).weight, *trained_lfk->weight);
    out.push_back(std::move(e));
  } else {
    out.push_back({"lfk", make(Kind::lfk, attention::Mode::linear, none), nullptr});
  }
  return out;
}

// Runs `linear` on every batch of `inputs` for draws 0 .. redraws - 1 and adds its errors to
// `acc` (this layer) and `all` (every layer): swap against `softmax_out`, Monte Carlo against
// `exact_out` (none when empty: no fixed kernel).
void measure(nn::AttentionKernel& linear, const std::vector<train::RecordingKernel::Inputs>& inputs,
             const std::vector<Tensor>& softmax_out, const std::vector<Tensor>& exact_out, std::int64_t redraws,
             Accumulator& acc, Accumulator& all) {
  for (std::int64_t draw = 0; draw < redraws; ++draw) {
    linear.set_feature_epoch(draw);
    double draw_sum = 0;
    std::int64_t draw_count = 0;
    for (std::size_t b = 0; b < inputs.size(); ++b) {
      const Tensor out = linear.forward(inputs[b].q, inputs[b].k, inputs[b].v);
      const std::vector<double> swap = train::row_relative_errors(out, softmax_out[b]);
      acc.add(acc.swap, swap);
      all.add(all.swap, swap);
      if (exact_out.empty()) continue;
      const std::vector<double> mc_errors = train::row_relative_errors(out, exact_out[b]);
      acc.add(acc.monte_carlo, mc_errors);
      all.add(all.monte_carlo, mc_errors);
      draw_sum += std::accumulate(mc_errors.begin(), mc_errors.end(), 0.0);
      draw_count += static_cast<std::int64_t>(mc_errors.size());
    }
    if (draw_count) acc.draw_means.push_back(draw_sum / static_cast<double>(draw_count));
  }
}

void push_rows(ProbeReport& report, int layer, const std::string& method, std::int64_t m, Accumulator& acc,
               bool has_monte_carlo) {
  // Pooled over heads first, then one row per head.
  std::vector<double> all_mc = Accumulator::pooled(acc.monte_carlo), all_swap = Accumulator::pooled(acc.swap);
  const double draw_sd = standard_deviation(acc.draw_means);
  report.rows.push_back({layer, -1, method, m, has_monte_carlo, error_stats(all_mc), error_stats(all_swap), draw_sd});
  for (std::size_t h = 0; h < acc.swap.size(); ++h)
    report.rows.push_back({layer, static_cast<int>(h), method, m, has_monte_carlo, error_stats(acc.monte_carlo[h]),
                           error_stats(acc.swap[h]), 0.0});
}

}  // namespace

ErrorStats error_stats(std::vector<double>& errors) {
  ErrorStats s;
  s.count = static_cast<std::int64_t>(errors.size());
  if (errors.empty()) return s;
  std::sort(errors.begin(), errors.end());
  const auto at = [&](double p) {
    const auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(errors.size())));
    return errors[std::min(errors.size() - 1, rank == 0 ? 0 : rank - 1)];
  };
  s.mean = std::accumulate(errors.begin(), errors.end(), 0.0) / static_cast<double>(errors.size());
  s.median = at(0.5);
  s.p90 = at(0.9);
  s.p99 = at(0.99);
  return s;
}

ProbeReport run_probe(nn::CausalLM& model, const train::RunConfig& config, const data::PreparedData& data,
                      const ProbeOptions& options) {
  DARK_CHECK(options.batches >= 1 && options.redraws >= 1 && options.calibration_batches >= 1 && !options.features.empty(),
             "probe: --batches, --redraws and --calibration-batches must be >= 1 and --features non-empty");
  DARK_CHECK(options.exact_window >= 0, "probe: --exact-window must be >= 0, got ", options.exact_window);
  for (std::int64_t m : options.features) DARK_CHECK(m >= 1, "probe: feature counts must be >= 1, got ", m);
  NoGradGuard no_grad;
  model.train(false);
  const data::ValidationSet val(data.open_shard(data::Split::val), config.training.batch_size, config.data.seq_len,
                                config.data.val_windows, model.device(), data.window_bos_id, config.data.windows);
  DARK_CHECK(val.num_batches() >= 1, "probe: the validation split has no batch of ", config.training.batch_size, " windows");
  std::vector<Tensor> val_batches, train_batches;
  for (std::int64_t b = 0; b < std::min(options.batches, val.num_batches()); ++b) val_batches.push_back(val.batch(b));
  data::LoaderOptions lo;
  lo.batch_size = config.training.batch_size;
  lo.seq_len = config.data.seq_len;
  lo.seed = config.seed;
  lo.device = model.device();
  lo.bos_id = data.window_bos_id;
  lo.windows = config.data.windows;
  const data::TrainLoader loader(data.open_shard(data::Split::train), lo);
  for (std::int64_t b = 0; b < options.calibration_batches; ++b) train_batches.push_back(loader.batch(b));

  spdlog::info("probe: recording attention inputs on {} validation and {} calibration batch(es)", val_batches.size(),
               train_batches.size());
  const auto measured = record_attention_inputs(model, val_batches);
  const auto calibration = record_attention_inputs(model, train_batches);
  const nn::ModelConfig& mc = model.config();
  ProbeReport report;
  std::map<std::pair<std::string, std::int64_t>, Accumulator> pooled;  // over layers
  std::map<std::pair<std::string, std::int64_t>, std::vector<double>> layer_draw_sds;
  std::vector<int> windows = {0};  // exact windows measured: none, then W
  if (options.exact_window > 0) windows.push_back(options.exact_window);
  train::ProgressLog progress("probe", "measurement", "measurements",
                              static_cast<std::int64_t>(measured.size() * options.features.size()));
  std::int64_t done = 0;
  for (std::size_t layer = 0; layer < measured.size(); ++layer) {
    const nn::AttentionShape shape{mc.n_heads, mc.n_kv_heads, mc.head_size(), static_cast<int>(layer), mc.dtype};
    // The swap reference is the layer's own attention: windowed on a gemma3 local layer. The
    // estimators approximate full causal attention (there is no windowed random-feature
    // kernel); the two agree while data.seq_len <= the window.
    nn::AttentionShape own = shape;
    own.window = mc.window_of(static_cast<int>(layer));
    attention::SoftmaxAttention softmax(own);
    std::vector<Tensor> softmax_out;
    for (const auto& in : measured[layer]) softmax_out.push_back(softmax.forward(in.q, in.k, in.v));
    const attention::AttentionConfig settings = train::attention_for_layer(config, static_cast<int>(layer));
    for (std::int64_t m : options.features) {
      spdlog::info("probe: layer {}/{}, m = {}", layer + 1, measured.size(), m);  // progress adds the ETA
      for (Estimator& e : estimators_for(shape, settings, *model.attention_kernels()[layer], m, config.seed,
                                         calibration[layer], model.device())) {
        std::vector<Tensor> exact_out;
        if (e.exact)
          for (const auto& in : measured[layer]) exact_out.push_back(e.exact->forward(in.q, in.k, in.v));
        // Without the window, then with it: the same kernel (features, M, proposal, draws).
        auto& kernel = dynamic_cast<attention::RandomFeatureAttention&>(*e.linear);
        for (int window : windows) {
          const std::string name = window == 0 ? e.name : e.name + " +window" + std::to_string(window);
          kernel.set_exact_window(window);
          Accumulator acc(mc.n_heads);
          Accumulator& all = pooled.try_emplace({name, m}, mc.n_heads).first->second;
          measure(kernel, measured[layer], softmax_out, exact_out, options.redraws, acc, all);
          layer_draw_sds[{name, m}].push_back(standard_deviation(acc.draw_means));
          push_rows(report, static_cast<int>(layer), name, m, acc, e.exact != nullptr);
        }
        kernel.set_exact_window(0);
      }
      progress.update(++done);
    }
  }
  for (auto& [key, acc] : pooled) {
    std::vector<double> all_mc = Accumulator::pooled(acc.monte_carlo), all_swap = Accumulator::pooled(acc.swap);
    // draw_sd over layers: the mean of the layers' draw_sd (draws vary within a layer).
    const std::vector<double>& sds = layer_draw_sds[key];
    report.rows.push_back({-1, -1, key.first, key.second, !all_mc.empty(), error_stats(all_mc), error_stats(all_swap),
                           std::accumulate(sds.begin(), sds.end(), 0.0) / static_cast<double>(sds.size())});
  }
  return report;
}

nlohmann::json ProbeReport::to_json() const {
  const auto stats = [](const ErrorStats& s) {
    return nlohmann::json{{"mean", s.mean}, {"median", s.median}, {"p90", s.p90}, {"p99", s.p99}, {"count", s.count}};
  };
  nlohmann::json rows_json = nlohmann::json::array();
  for (const ProbeRow& r : rows) {
    nlohmann::json j = {{"layer", r.layer < 0 ? nlohmann::json("all") : nlohmann::json(r.layer)},
                        {"head", r.head < 0 ? nlohmann::json("all") : nlohmann::json(r.head)},
                        {"method", r.method},
                        {"features", r.features},
                        {"swap", stats(r.swap)}};
    if (r.has_monte_carlo) {
      j["monte_carlo"] = stats(r.monte_carlo);
      if (r.head < 0) j["draw_sd"] = r.draw_sd;
    }
    rows_json.push_back(j);
  }
  return {{"format", "darkformer-probe"}, {"version", 1}, {"rows", rows_json}};
}

std::string ProbeReport::table() const {
  std::string out;
  char line[256];
  int width = 26;  // the method column, wider for a longer name ("darkformer_whiten_var_opt +window64")
  for (const ProbeRow& r : rows) width = std::max(width, static_cast<int>(r.method.size()));
  const auto header = [&](const std::string& title) {
    out += title + "\n";
    std::snprintf(line, sizeof line, "%-*s %5s | %8s %8s %8s %8s %8s | %8s %8s %8s %8s\n", width, "method", "m",
                  "mc mean", "mc p50", "mc p90", "mc p99", "draw sd", "swap mean", "swap p50", "swap p90", "swap p99");
    out += line;
  };
  int current = -2;
  // Layers pooled first (the summary), then each layer.
  std::vector<const ProbeRow*> order;
  for (const ProbeRow& r : rows)
    if (r.layer < 0) order.push_back(&r);
  for (const ProbeRow& r : rows)
    if (r.layer >= 0 && r.head < 0) order.push_back(&r);
  for (const ProbeRow* r : order) {
    if (r->layer != current) {
      current = r->layer;
      header(current < 0 ? "all layers" : "layer " + std::to_string(current));
    }
    if (r->has_monte_carlo) {
      std::snprintf(line, sizeof line, "%-*s %5lld | %8.4f %8.4f %8.4f %8.4f %8.4f | %9.4f %8.4f %8.4f %8.4f\n",
                    width, r->method.c_str(), static_cast<long long>(r->features), r->monte_carlo.mean,
                    r->monte_carlo.median, r->monte_carlo.p90, r->monte_carlo.p99, r->draw_sd, r->swap.mean,
                    r->swap.median, r->swap.p90, r->swap.p99);
    } else {
      std::snprintf(line, sizeof line, "%-*s %5lld | %8s %8s %8s %8s %8s | %9.4f %8.4f %8.4f %8.4f\n",
                    width, r->method.c_str(), static_cast<long long>(r->features), "-", "-", "-", "-", "-",
                    r->swap.mean, r->swap.median, r->swap.p90, r->swap.p99);
    }
    out += line;
  }
  return out;
}

}  // namespace dark::experiments
