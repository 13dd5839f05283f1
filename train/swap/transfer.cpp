// Attention transfer (see transfer.h).
#include "train/swap/transfer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>
#include <optional>
#include <utility>

#include "attention/random_feature_attention.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/philox.h"
#include "nn/optim.h"
#include "nn/parameter_buffer.h"
#include "train/data_parallel.h"
#include "train/memory_limit.h"
#include "train/progress.h"
#include "train/swap/attention_weights.h"
#include "train/swap/kernel_scope.h"
#include "train/swap/source_attention.h"
#include "train/swap/transfer_state.h"

namespace dark::train {
namespace {

constexpr double kTargetFloor = 1e-6;  // added to |target|^2: a row of zeros has no relative error
// Philox streams of the transfer's own draws: the query rows of the attention-weight term and
// the window dropout, keyed by step (so a continued transfer draws what an uninterrupted one does).
constexpr std::uint64_t kStreamRows = 0x7472616e73726f77ULL, kStreamWindowDropout = 0x7472616e7364726fULL;

// What a fitting kernel adds up over the measured batches (LayerFit, before and after).
struct FitSums {
  std::vector<double> row_errors;
  double diff = 0, target = 0, output = 0, kl = 0;
  std::int64_t kl_batches = 0;
  LayerFit fit() {
    LayerFit f;
    f.error = summarise(row_errors);
    f.output_error = diff / (target + kTargetFloor);
    f.norm_ratio = std::sqrt(output / (target + kTargetFloor));
    f.attention_kl = kl_batches ? kl / static_cast<double>(kl_batches) : 0.0;
    return f;
  }
};

// A swapped layer's kernel during the transfer: runs the layer's own kernel, scores it against
// the source's attention of the same input, and returns the source's output, so later layers
// see the source's stream and no gradient reaches earlier layers through it.
class FittingKernel final : public KernelWrapper {
 public:
  using KernelWrapper::KernelWrapper;
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask) override {
    SourceAttention::Target target = source->take(index);
    const Tensor out = inner->forward(q, k, v, key_mask);
    auto* features = dynamic_cast<attention::RandomFeatureAttention*>(inner.get());
    DARK_CHECK(features != nullptr, "attention transfer: layer ", source->layers()[index], " runs ", inner->kind(),
               ", which has no attention weights to fit");
    if (sums) {  // measuring
      NoGradGuard no_grad;
      const std::vector<double> e = row_relative_errors(out, target.out);
      sums->row_errors.insert(sums->row_errors.end(), e.begin(), e.end());
      sums->diff += sum(square(sub(out, target.out))).to(DType::f64).item();
      sums->target += sum(square(target.out)).to(DType::f64).item();
      sums->output += sum(square(out)).to(DType::f64).item();
      sums->kl += attention_weight_divergence(*features, q, k, target.q, target.k, *rows).item();
      ++sums->kl_batches;
    } else {  // fitting: this layer's terms of the loss
      const Tensor diff = sum(square(sub(out, target.out))), norm = sum(square(target.out));
      output_term = div(diff, add_scalar(norm, kTargetFloor));
      attention_term = attention_weight > 0
                           ? attention_weight_divergence(*features, q, k, target.q, target.k, *rows)
                           : Tensor();
    }
    return target.out;
  }

  SourceAttention* source = nullptr;
  std::size_t index = 0;                        // in source->layers()
  const std::vector<std::int64_t>* rows = nullptr;  // the query rows of the attention-weight term
  double attention_weight = 0;
  FitSums* sums = nullptr;                      // set: measure into it instead of computing the loss
  Tensor output_term, attention_term;           // the last fitting forward's (one-element, the model's dtype)
};

// While alive, exactly the given parameters require grad; the flags are restored afterwards.
class RequiresGradScope {
 public:
  RequiresGradScope(nn::CausalLM& model, const std::vector<std::pair<std::string, Tensor*>>& trainable) {
    for (auto& [name, p] : model.named_parameters()) {
      saved_.emplace_back(p, p->requires_grad());
      p->set_requires_grad(false);
    }
    for (const auto& [name, p] : trainable) p->set_requires_grad(true);
  }
  RequiresGradScope(const RequiresGradScope&) = delete;
  RequiresGradScope& operator=(const RequiresGradScope&) = delete;
  ~RequiresGradScope() {
    for (auto& [p, flag] : saved_) p->set_requires_grad(flag);
  }

 private:
  std::vector<std::pair<Tensor*, bool>> saved_;
};

// The trained tensors in a flat buffer with their AdamW for the transfer's life; afterwards
// each is a tensor of its own again (nothing of the buffer stays alive through a parameter
// that finetuning leaves frozen).
class TransferOptimizer {
 public:
  TransferOptimizer(const std::vector<std::pair<std::string, Tensor*>>& params, double lr)
      : buffer_(params), optimizer_(buffer_, settings(lr)), lr_(lr) {}
  TransferOptimizer(const TransferOptimizer&) = delete;
  TransferOptimizer& operator=(const TransferOptimizer&) = delete;
  ~TransferOptimizer() {
    NoGradGuard no_grad;
    for (const nn::ParameterBuffer::Entry& e : buffer_.entries()) {
      const bool wanted = e.param->requires_grad();
      *e.param = e.param->detach().clone();
      e.param->set_requires_grad(wanted);
    }
  }
  void zero_grad() { buffer_.zero_grad(); }
  Tensor grads() const { return buffer_.grads(); }
  void step() { optimizer_.step(lr_); }
  // The parameters and AdamW's state into `state`, on the CPU.
  void save(TransferState& state) const {
    for (const nn::ParameterBuffer::Entry& e : buffer_.entries())
      state.params[e.name] = e.param->to(Device::cpu()).contiguous();
    for (auto& [name, t] : optimizer_.state()) state.optimizer[name] = t.to(Device::cpu());
  }
  void restore(const TransferState& state) {
    NoGradGuard no_grad;
    for (const nn::ParameterBuffer::Entry& e : buffer_.entries()) {
      const auto it = state.params.find(e.name);
      DARK_CHECK(it != state.params.end() && it->second.shape() == e.param->shape(), "attention transfer: the saved state "
                 "has no parameter of shape ", shape_str(e.param->shape()), " for ", e.name);
      e.param->copy_(it->second.to(e.param->dtype()).to(e.param->device()));
    }
    optimizer_.load_state(state.optimizer);
  }

 private:
  static nn::OptimizerConfig settings(double lr) {
    nn::OptimizerConfig c;
    c.name = nn::OptimizerKind::adamw;
    c.lr = lr;
    c.betas = {0.9, 0.999};
    c.weight_decay = 0.0;  // a few hundred steps on a few tensors: nothing to regularise toward zero
    return c;
  }
  nn::ParameterBuffer buffer_;
  nn::Optimizer optimizer_;
  double lr_;
};

nlohmann::json eval_json(const EvalMetrics& e) {
  return {{"loss", e.loss}, {"accuracy", e.accuracy}, {"perplexity", e.perplexity}, {"tokens", e.tokens}};
}
EvalMetrics eval_from_json(const nlohmann::json& j) {
  EvalMetrics e;
  e.loss = j.at("loss").get<double>();
  e.perplexity = j.at("perplexity").get<double>();
  e.accuracy = j.at("accuracy").get<double>();
  e.tokens = j.at("tokens").get<std::int64_t>();
  return e;
}

// The inputs of a (B, T + 1) token batch.
Tensor inputs_of(const Tensor& tokens) { return core::slice(tokens, 1, 0, tokens.size(1) - 1).contiguous(); }

// `count` distinct query rows of [0, T) for micro-batch `micro_batch` (its index in the run's
// sequence, train/data_parallel.h, so ranks draw what one process does), ascending: a partial
// Fisher-Yates shuffle from Philox; every row when count >= T.
std::vector<std::int64_t> sampled_rows(std::uint64_t seed, std::int64_t micro_batch, std::int64_t T, std::int64_t count) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(T));
  std::iota(all.begin(), all.end(), std::int64_t{0});
  const std::int64_t n = std::min(count, T);
  for (std::int64_t i = 0; i < n; ++i) {
    const philox::Block b = philox::block(seed, kStreamRows, (static_cast<std::uint64_t>(micro_batch) << 24) + i);
    const auto j = i + static_cast<std::int64_t>(philox::uniform01(b.v[0]) * static_cast<double>(T - i));
    std::swap(all[i], all[std::min(j, T - 1)]);
  }
  all.resize(static_cast<std::size_t>(n));
  std::sort(all.begin(), all.end());
  return all;
}

// `count` evenly spaced rows of [0, T): the measurements' fixed sample.
std::vector<std::int64_t> spaced_rows(std::int64_t T, std::int64_t count) {
  const std::int64_t n = std::min(count, T);
  std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < n; ++r) rows[r] = ((2 * r + 1) * T) / (2 * n);
  return rows;
}

// The parameters of the swapped layers that finetune.transfer.trainable selects.
std::vector<std::pair<std::string, Tensor*>> transfer_parameters(nn::CausalLM& model, const std::vector<int>& layers,
                                                                 const std::vector<std::string>& entries) {
  auto in_swapped_layer = [&](const std::string& name) {
    return std::any_of(layers.begin(), layers.end(), [&](int i) {
      return name.starts_with("model.layers." + std::to_string(i) + ".self_attn.");
    });
  };
  std::vector<std::pair<std::string, Tensor*>> selected;
  auto params = model.named_parameters();
  for (const std::string& entry : entries) {
    const std::vector<std::string> globs = transfer_globs({entry});
    const bool matches = std::any_of(params.begin(), params.end(), [&](const auto& np) {
      return in_swapped_layer(np.first) && nn::matches_any(np.first, globs);
    });
    DARK_CHECK(matches, "config: finetune.transfer.trainable: \"", entry,
               "\" selects no parameter of the swapped layers",
               entry == "feature_map" ? " (performer has no parameters of its own: use [\"qk\"])" : "");
  }
  const std::vector<std::string> globs = transfer_globs(entries);
  for (auto& [name, p] : params)
    if (in_swapped_layer(name) && nn::matches_any(name, globs)) selected.emplace_back(name, p);
  return selected;
}

void set_epochs(KernelScope<FittingKernel>& fitters, std::int64_t epoch) {
  for (FittingKernel* f : fitters.at) f->inner->set_feature_epoch(epoch);
}

// The swapped model with the fitting kernels, the source's attention and what a step needs.
struct Fit {
  nn::CausalLM& model;
  SourceAttention& source;
  KernelScope<FittingKernel>& fitters;
  std::size_t through;             // blocks run: up to the last swapped layer
  std::vector<std::int64_t> rows;  // the query rows of the attention-weight term, for the batch being run
};

// Each swapped layer measured on the first `batches` validation batches at the held-out draw.
std::vector<LayerFit> measure(Fit& fit, const data::BatchSet& val, int batches, std::int64_t rows_per_sequence) {
  NoGradGuard no_grad;
  set_epochs(fit.fitters, 0);
  std::vector<FitSums> sums(fit.fitters.at.size());
  const std::int64_t n = std::min<std::int64_t>(batches, val.num_batches());
  for (std::size_t j = 0; j < sums.size(); ++j) fit.fitters.at[j]->sums = &sums[j];
  for (std::int64_t b = 0; b < n; ++b) {
    const Tensor ids = inputs_of(val.batch(b));
    fit.rows = spaced_rows(ids.size(1), rows_per_sequence);
    fit.model.hidden_states_through(ids, fit.through);
  }
  std::vector<LayerFit> out;
  for (std::size_t j = 0; j < sums.size(); ++j) {
    fit.fitters.at[j]->sums = nullptr;
    out.push_back(sums[j].fit());
  }
  return out;
}

// Window dropout for step `step`: which layers run without their exact window this step.
std::vector<bool> windows_dropped(const TransferConfig& tc, std::uint64_t seed, std::int64_t step,
                                  const KernelScope<FittingKernel>& fitters) {
  std::vector<bool> dropped(fitters.at.size(), false);
  const double p = window_dropout_probability(tc, step);
  if (p <= 0) return dropped;
  for (std::size_t j = 0; j < dropped.size(); ++j) {
    const auto* kernel = dynamic_cast<const attention::RandomFeatureAttention*>(fitters.at[j]->inner.get());
    if (!kernel || kernel->config().exact_window == 0) continue;
    const philox::Block b =
        philox::block(seed, kStreamWindowDropout, static_cast<std::uint64_t>(step) * fitters.at.size() + j);
    dropped[j] = philox::uniform01(b.v[0]) < p;
  }
  return dropped;
}

// Runs one step's micro-batch loss terms; returns (output term, attention term) summed over layers.
struct StepTerms {
  Tensor total;  // the weighted sum (one element, the model's dtype), differentiable
  double output = 0, attention = 0;
};
StepTerms step_terms(Fit& fit, const TransferConfig& tc) {
  StepTerms t;
  for (FittingKernel* f : fit.fitters.at) {
    Tensor layer = mul_scalar(f->output_term, tc.output_weight);
    t.output += f->output_term.item();
    if (f->attention_term.defined()) {
      layer = add(layer, mul_scalar(f->attention_term, tc.attention_weight));
      t.attention += f->attention_term.item();
    }
    t.total = t.total.defined() ? add(t.total, layer) : layer;
    f->output_term = f->attention_term = Tensor();
  }
  return t;
}

void log_layers(const std::vector<LayerTransfer>& layers) {
  for (const LayerTransfer& l : layers) {
    spdlog::info("attention transfer: layer {:>2} ({}): relative error mean {:.3f} -> {:.3f}, median {:.3f} -> {:.3f}; "
                 "output term {:.3f} -> {:.3f}; attention KL {:.3f} -> {:.3f} nats; output norm / exact {:.2f} -> {:.2f}",
                 l.layer, l.kind, l.before.error.mean, l.after.error.mean, l.before.error.median, l.after.error.median,
                 l.before.output_error, l.after.output_error, l.before.attention_kl, l.after.attention_kl,
                 l.before.norm_ratio, l.after.norm_ratio);
    if (l.collapsed())
      spdlog::warn("attention transfer: layer {} collapsed: its output norm is {:.2f} of the exact attention's (under {}): "
                   "the fit went silent; raise finetune.transfer.attention_weight or lower finetune.transfer.lr",
                   l.layer, l.after.norm_ratio, kCollapsedNorm);
  }
}

}  // namespace

nlohmann::json LayerFit::to_json() const {
  return {{"error", summary_json(error)},
          {"output_error", output_error},
          {"attention_kl", attention_kl},
          {"norm_ratio", norm_ratio}};
}

LayerFit LayerFit::from_json(const nlohmann::json& j) {
  LayerFit f;
  f.error = summary_from_json(j.at("error"));
  f.output_error = j.at("output_error").get<double>();
  f.attention_kl = j.at("attention_kl").get<double>();
  f.norm_ratio = j.at("norm_ratio").get<double>();
  return f;
}

std::vector<std::string> transfer_globs(const std::vector<std::string>& entries) {
  std::vector<std::string> globs;
  for (const std::string& e : entries) {
    const bool qk = e == "qk" || e == "qkv";
    if (e == "feature_map" || qk) globs.push_back("*.self_attn.feature_map.*");
    if (qk)
      for (const char* g : {"*.self_attn.q_proj.*", "*.self_attn.k_proj.*", "*.self_attn.q_norm.*", "*.self_attn.k_norm.*"})
        globs.push_back(g);
    if (e == "qkv") globs.push_back("*.self_attn.v_proj.*");
    if (e != "feature_map" && !qk) globs.push_back(e);
  }
  return globs;
}

std::vector<int> swapped_layers(nn::CausalLM& model) {
  std::vector<int> layers;
  const auto kernels = model.attention_kernels();
  for (std::size_t i = 0; i < kernels.size(); ++i)
    if (std::string(kernels[i]->kind()) != "softmax") layers.push_back(static_cast<int>(i));
  return layers;
}

double window_dropout_probability(const TransferConfig& transfer, std::int64_t step) {
  if (transfer.window_dropout <= 0 || transfer.steps <= 0) return 0.0;
  return transfer.window_dropout * (1.0 - static_cast<double>(step) / static_cast<double>(transfer.steps));
}

std::int64_t transfer_feature_epoch(std::int64_t step, std::int64_t redraw_interval) {
  return 1 + (redraw_interval > 0 ? step / redraw_interval : 0);
}

nlohmann::json TransferReport::to_json() const {
  nlohmann::json layers_json = nlohmann::json::array();
  for (const LayerTransfer& l : layers)
    layers_json.push_back({{"layer", l.layer},
                           {"kind", l.kind},
                           {"error_before", summary_json(l.before.error)},
                           {"error_after", summary_json(l.after.error)},
                           {"before", l.before.to_json()},
                           {"after", l.after.to_json()},
                           {"collapsed", l.collapsed()}});
  std::int64_t collapsed = 0;
  for (const LayerTransfer& l : layers) collapsed += l.collapsed() ? 1 : 0;
  return {{"steps", steps},           {"tokens_per_step", tokens_per_step}, {"ranks", ranks}, {"seconds", seconds},
          {"peak_resident_mib", peak_resident_mib},
          {"first_loss", first_loss}, {"last_loss", last_loss},             {"trainable", trainable},
          {"validation_at_swap", eval_json(at_swap)},  {"resumed_at", resumed_at},
          {"collapsed_layers", collapsed}, {"layers", layers_json}};
}

TransferReport run_transfer(nn::CausalLM& model, const RunConfig& config, const data::BatchSource& loader,
                            const data::BatchSet& val, dist::Communicator& comm, const TransferKeeping& keeping) {
  const TransferConfig& tc = config.finetune.transfer;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int> layers = swapped_layers(model);
  DARK_CHECK(!layers.empty(), "config: finetune.transfer: no layer is swapped (every layer's attention is softmax): "
                              "set attention.kind to performer, lfk or darkformer");
  const auto trainable = transfer_parameters(model, layers, tc.trainable);
  const int world = comm.world_size(), rank = comm.rank(), accum = config.training.grad_accum;
  const nlohmann::json settings = transfer_settings(config, world);
  const std::optional<TransferState> saved =
      keeping.run_dir.empty() ? std::nullopt : load_transfer_state(keeping.run_dir, settings);

  TransferReport report;
  report.steps = tc.steps;
  report.ranks = world;
  report.tokens_per_step = static_cast<std::int64_t>(config.training.batch_size) * accum * world * config.data.seq_len;
  std::int64_t numel = 0;
  for (const auto& [name, p] : trainable) {
    report.trainable.push_back(name);
    numel += p->numel();
  }
  for (nn::AttentionKernel* k : model.attention_kernels()) k->set_feature_epoch(0);
  if (saved) {
    report.resumed_at = saved->step;
    report.at_swap = eval_from_json(saved->record.at("at_swap"));
    report.first_loss = saved->record.at("first_loss").get<double>();
  } else {
    report.at_swap = evaluate(model, val, config.training.eval_batches, comm);
  }
  spdlog::info("attention transfer: at swap, before it: val loss {:.4f} | accuracy {:.3f} ({} tokens)", report.at_swap.loss,
               report.at_swap.accuracy, report.at_swap.tokens);

  const bool was_training = model.training();
  model.train(false);
  RequiresGradScope grads(model, trainable);
  SourceAttention source(model, layers);
  KernelScope<FittingKernel> fitters(model, layers);
  Fit fit{model, source, fitters, static_cast<std::size_t>(layers.back()) + 1, {}};
  for (std::size_t j = 0; j < layers.size(); ++j) {
    fitters.at[j]->source = &source;
    fitters.at[j]->index = j;
    fitters.at[j]->rows = &fit.rows;
    fitters.at[j]->attention_weight = tc.attention_weight;
  }

  std::string what;
  for (const std::string& e : tc.trainable) what += (what.empty() ? "" : ", ") + e;
  spdlog::info("attention transfer: {} swapped layer(s), {} step(s) of {} tokens, lr {:g}; loss {:g} x output term + {:g} "
               "x attention KL on {} rows a sequence; features redrawn every {} steps; {} tensor(s) ({} parameters) train: {}",
               layers.size(), tc.steps, report.tokens_per_step, tc.lr, tc.output_weight, tc.attention_weight,
               tc.attention_rows, tc.redraw_interval, trainable.size(), numel, what);

  TransferOptimizer optimizer(trainable, tc.lr);
  std::vector<LayerFit> before;
  if (saved) {
    optimizer.restore(*saved);
    for (const nlohmann::json& e : saved->record.at("before")) before.push_back(LayerFit::from_json(e));
    DARK_CHECK(before.size() == layers.size(), "attention transfer: the saved state measured ", before.size(),
               " layer(s), the model swaps ", layers.size());
    spdlog::info("attention transfer: continuing the saved transfer at step {}/{}", saved->step, tc.steps);
  } else {
    before = measure(fit, val, tc.eval_batches, tc.attention_rows);
  }
  // The state --resume continues from: the parameters and moments after `done` steps.
  const auto save_state = [&](std::int64_t done) {
    if (keeping.run_dir.empty() || !keeping.writes) return;
    TransferState state;
    state.step = done;
    optimizer.save(state);
    nlohmann::json fits = nlohmann::json::array();
    for (const LayerFit& f : before) fits.push_back(f.to_json());
    state.record = {{"at_swap", eval_json(report.at_swap)}, {"before", fits}, {"first_loss", report.first_loss}};
    save_transfer_state(keeping.run_dir, state, settings);
  };
  const auto loop_start = std::chrono::steady_clock::now();
  const std::int64_t first_step = report.resumed_at;
  // The gradients of the mean over the global batch: each micro-batch's loss scaled by
  // 1 / (grad_accum x ranks), the micro-batches' gradients added by backward, the ranks' by
  // an all-reduce; the logged loss is the global batch's.
  const double part = 1.0 / (static_cast<double>(accum) * world);
  for (std::int64_t step = first_step; step < tc.steps; ++step) {
    set_epochs(fitters, transfer_feature_epoch(step, tc.redraw_interval));
    const std::vector<bool> dropped = windows_dropped(tc, config.seed, step, fitters);
    std::vector<int> windows(layers.size(), 0);
    for (std::size_t j = 0; j < layers.size(); ++j) {
      if (!dropped[j]) continue;
      auto* kernel = static_cast<attention::RandomFeatureAttention*>(fitters.at[j]->inner.get());
      windows[j] = kernel->config().exact_window;
      kernel->set_exact_window(0);
    }
    optimizer.zero_grad();
    Tensor sums = Tensor::zeros({3}, DType::f64, Device::cpu());  // loss, output term, attention term
    for (int micro = 0; micro < accum; ++micro) {
      const std::int64_t index = micro_batch_index(step, rank, world, accum, micro);
      const Tensor ids = inputs_of(loader.batch(index));
      fit.rows = sampled_rows(config.seed, index, ids.size(1), tc.attention_rows);
      model.hidden_states_through(ids, fit.through);
      const StepTerms terms = step_terms(fit, tc);
      const Tensor loss = mul_scalar(terms.total, part);
      backward(loss);
      sums = add(sums, Tensor::from_vector<double>({loss.detach().item(), terms.output * part, terms.attention * part}, {3}));
    }
    for (std::size_t j = 0; j < layers.size(); ++j)
      if (dropped[j]) static_cast<attention::RandomFeatureAttention*>(fitters.at[j]->inner.get())->set_exact_window(windows[j]);
    if (world > 1) {
      Tensor g = optimizer.grads();
      comm.all_reduce(g);
      sums = sums.to(comm.device());
      comm.all_reduce(sums);
    }
    const std::vector<double> v = sums.to(Device::cpu()).to_vector<double>();
    DARK_CHECK(std::isfinite(v[0]), "attention transfer: the loss is ", v[0], " at step ", step + 1,
               " (lower finetune.transfer.lr)");
    optimizer.step();
    if (step == 0) report.first_loss = v[0];
    report.last_loss = v[0];
    const std::int64_t done = step + 1;
    if (done % std::max<std::int64_t>(1, config.training.log_interval) == 0 || done == tc.steps) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start).count();
      const double per_step = elapsed / static_cast<double>(done - first_step);
      spdlog::info("transfer step {:>5}/{} {} | loss {:.4f} (output {:.4f}, attention KL {:.4f}, summed over layers) | "
                   "{:.2f} s/step | ETA {}",
                   done, tc.steps, progress_bar(done, tc.steps), v[0], v[1], v[2], per_step,
                   duration_text(per_step * static_cast<double>(tc.steps - done)));
    }
    const bool stop = keeping.stop_requested && keeping.stop_requested();
    if (done < tc.steps && (stop || (tc.checkpoint_interval > 0 && done % tc.checkpoint_interval == 0))) save_state(done);
    if (stop && done < tc.steps) {
      spdlog::info("attention transfer: stopped by a signal at step {}/{}; its state is in {}; continue with --resume",
                   done, tc.steps, (keeping.run_dir / "transfer").string());
      set_epochs(fitters, 0);
      model.train(was_training);
      report.stopped = true;
      return report;
    }
  }
  const std::vector<LayerFit> after = measure(fit, val, tc.eval_batches, tc.attention_rows);
  model.train(was_training);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.peak_resident_mib = static_cast<double>(peak_resident_bytes()) / (1 << 20);
  for (std::size_t j = 0; j < layers.size(); ++j)
    report.layers.push_back({layers[j], fitters.at[j]->inner->kind(), before[j], after[j]});
  log_layers(report.layers);
  if (!keeping.run_dir.empty() && keeping.writes) remove_transfer_state(keeping.run_dir);
  spdlog::info("attention transfer: done in {}{}; peak resident set so far {:.0f} MiB", duration_text(report.seconds),
               report.resumed_at ? str(" (continued at step ", report.resumed_at, ")") : std::string(),
               report.peak_resident_mib);
  return report;
}

}  // namespace dark::train
