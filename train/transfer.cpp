// Attention transfer (see transfer.h).
#include "train/transfer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <utility>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/optim.h"
#include "train/attention_state.h"
#include "train/data_parallel.h"
#include "train/memory_limit.h"
#include "train/model_builder.h"
#include "train/progress.h"
#include "train/transfer_state.h"

namespace dark::train {
namespace {

constexpr double kTargetFloor = 1e-6;  // added to |target|^2: a row of zeros has no relative error

// The frozen model's kernel at a swapped layer: passes its output through and keeps it.
class OutputRecorder final : public nn::AttentionKernel {
 public:
  explicit OutputRecorder(std::unique_ptr<nn::AttentionKernel> inner_) : inner(std::move(inner_)) {}
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask) override {
    output = inner->forward(q, k, v, key_mask);
    return output;
  }
  Tensor decode(const Tensor& q, const Tensor& k, const Tensor& v, std::unique_ptr<nn::DecodeState>& state) override {
    return inner->decode(q, k, v, state);
  }
  const char* kind() const override { return inner->kind(); }

  std::unique_ptr<nn::AttentionKernel> inner;
  Tensor output;
};

// A swapped layer's kernel during transfer: runs the layer's own kernel, scores it against the
// frozen model's output (target), and returns the target, so later layers see the frozen
// model's stream and no gradient reaches earlier layers through it.
class FittingKernel final : public nn::AttentionKernel {
 public:
  explicit FittingKernel(std::unique_ptr<nn::AttentionKernel> inner_) : inner(std::move(inner_)) {}
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask) override {
    DARK_CHECK(target.defined(), "attention transfer: a swapped layer ran without its target");
    const Tensor out = inner->forward(q, k, v, key_mask);
    const Tensor diff = square(sub(out, target)), norm = square(target);
    if (errors) {  // measuring: |out - target| / |target| per (batch, position, head)
      const Tensor rows = div(sum(diff, {3}), add_scalar(sum(norm, {3}), kTargetFloor));
      const std::vector<double> e = sqrt(rows).to(Device::cpu()).to(DType::f64).to_vector<double>();
      errors->insert(errors->end(), e.begin(), e.end());
    } else {  // |out - target|^2 / |target|^2 over the whole batch of this layer
      loss = div(sum(diff), add_scalar(sum(norm), kTargetFloor));
    }
    return std::exchange(target, Tensor());
  }
  Tensor decode(const Tensor& q, const Tensor& k, const Tensor& v, std::unique_ptr<nn::DecodeState>& state) override {
    return inner->decode(q, k, v, state);
  }
  const char* kind() const override { return inner->kind(); }

  std::unique_ptr<nn::AttentionKernel> inner;
  Tensor target, loss;
  std::vector<double>* errors = nullptr;  // set: measure into it instead of computing the loss
};

// Puts a Wrapper in front of the kernels of `layers` for the scope's life; the model gets its
// own kernels back on every path out.
template <class Wrapper>
class WrapScope {
 public:
  WrapScope(nn::CausalLM& model, const std::vector<int>& layers) : model_(model), layers_(layers) {
    for (int i : layers_) {
      auto& slot = model_.model.layers[i]->self_attn.kernel;
      auto wrapper = std::make_unique<Wrapper>(std::move(slot));
      at.push_back(wrapper.get());
      slot = std::move(wrapper);
    }
  }
  WrapScope(const WrapScope&) = delete;
  WrapScope& operator=(const WrapScope&) = delete;
  ~WrapScope() {
    for (std::size_t j = 0; j < layers_.size(); ++j) model_.model.layers[layers_[j]]->self_attn.kernel = std::move(at[j]->inner);
  }
  std::vector<Wrapper*> at;  // by position in `layers`

 private:
  nn::CausalLM& model_;
  std::vector<int> layers_;
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

// AdamW without weight decay on a few tensors (the transfer's parameters may already be views
// of the finetuning's flat buffer, which a second buffer must not take over).
class Adam {
 public:
  Adam(const std::vector<std::pair<std::string, Tensor*>>& params, double lr) : lr_(lr) {
    for (const auto& [name, p] : params) {
      Tensor zero = Tensor::empty(p->shape(), p->dtype(), p->device());
      zero.fill_(0.0);
      state_.push_back({name, p, zero, zero.clone()});
    }
  }
  // The parameters and moments into `state`, by parameter name, on the CPU.
  void save(TransferState& state) const {
    for (const Slot& s : state_) {
      state.params[s.name] = s.param->to(Device::cpu()).contiguous();
      state.exp_avg[s.name] = s.m.to(Device::cpu()).contiguous();
      state.exp_avg_sq[s.name] = s.v.to(Device::cpu()).contiguous();
    }
  }
  // Continues from a saved state: its parameters, moments and step count.
  void restore(const TransferState& state) {
    NoGradGuard no_grad;
    for (Slot& s : state_) {
      const auto read = [&](const formats::TensorMap& map, const char* what) {
        auto it = map.find(s.name);
        DARK_CHECK(it != map.end() && it->second.shape() == s.param->shape(), "attention transfer: the saved state has no ",
                   what, " of shape ", shape_str(s.param->shape()), " for ", s.name);
        return it->second.to(s.param->dtype()).to(s.param->device());
      };
      s.param->copy_(read(state.params, "parameter"));
      s.m.copy_(read(state.exp_avg, "exp_avg"));
      s.v.copy_(read(state.exp_avg_sq, "exp_avg_sq"));
    }
    t_ = state.step;
  }
  void step() {
    NoGradGuard no_grad;
    ++t_;
    const double c1 = 1.0 - std::pow(kBeta1, static_cast<double>(t_)), c2 = 1.0 - std::pow(kBeta2, static_cast<double>(t_));
    for (Slot& s : state_) {
      const Tensor g = s.param->grad();
      if (!g.defined()) continue;
      s.m.copy_(add(mul_scalar(s.m, kBeta1), mul_scalar(g, 1.0 - kBeta1)));
      s.v.copy_(add(mul_scalar(s.v, kBeta2), mul_scalar(square(g), 1.0 - kBeta2)));
      const Tensor update = div(mul_scalar(s.m, lr_ / c1), add_scalar(sqrt(mul_scalar(s.v, 1.0 / c2)), kEps));
      s.param->copy_(sub(*s.param, update));
      s.param->zero_grad();
    }
  }

 private:
  static constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;
  struct Slot {
    std::string name;
    Tensor* param;
    Tensor m, v;
  };
  std::vector<Slot> state_;
  double lr_;
  std::int64_t t_ = 0;
};

ErrorSummary summarise(std::vector<double>& errors) {
  ErrorSummary s;
  s.count = static_cast<std::int64_t>(errors.size());
  if (errors.empty()) return s;
  double total = 0;
  for (double e : errors) total += e;
  s.mean = total / static_cast<double>(errors.size());
  const auto mid = errors.begin() + static_cast<std::ptrdiff_t>(errors.size() / 2);
  std::nth_element(errors.begin(), mid, errors.end());
  s.median = *mid;
  return s;
}

nlohmann::json summary_json(const ErrorSummary& s) { return {{"mean", s.mean}, {"median", s.median}, {"count", s.count}}; }
ErrorSummary summary_from_json(const nlohmann::json& j) {
  return {j.at("mean").get<double>(), j.at("median").get<double>(), j.at("count").get<std::int64_t>()};
}
nlohmann::json eval_json(const EvalMetrics& e) {
  return {{"loss", e.loss}, {"accuracy", e.accuracy}, {"perplexity", e.perplexity}, {"tokens", e.tokens}};
}
EvalMetrics eval_from_json(const nlohmann::json& j) {
  return {j.at("loss").get<double>(), j.at("perplexity").get<double>(), j.at("accuracy").get<double>(),
          j.at("tokens").get<std::int64_t>()};
}

// The inputs of a (B, T + 1) token batch.
Tensor inputs_of(const Tensor& tokens) { return core::slice(tokens, 1, 0, tokens.size(1) - 1).contiguous(); }

// The source model as it was loaded: `model`'s weights with every layer softmax.
std::unique_ptr<nn::CausalLM> frozen_copy(nn::CausalLM& model, const RunConfig& config, Device device) {
  RunConfig softmax = config;
  softmax.attention = attention::AttentionConfig{};  // softmax everywhere (local layers keep their window)
  std::unique_ptr<nn::CausalLM> frozen = build_model(softmax);
  std::map<std::string, Tensor*> ours;
  for (auto& [name, p] : model.named_parameters()) ours[name] = p;
  NoGradGuard no_grad;
  for (auto& [name, p] : frozen->named_parameters()) {
    auto it = ours.find(name);
    DARK_CHECK(it != ours.end(), "attention transfer: the swapped model has no parameter '", name, "'");
    p->copy_(it->second->to(Device::cpu()));
    p->set_requires_grad(false);
  }
  frozen->to(device);
  frozen->train(false);
  return frozen;
}

struct Pair {
  nn::CausalLM& model;
  nn::CausalLM& frozen;
  std::vector<int> layers;  // swapped, ascending
};

// One batch through both models: the frozen one's outputs become the fitting kernels' targets.
void run_batch(Pair& pair, WrapScope<OutputRecorder>& recorders, WrapScope<FittingKernel>& fitters, const Tensor& ids) {
  const std::size_t through = static_cast<std::size_t>(pair.layers.back()) + 1;
  {
    NoGradGuard no_grad;
    pair.frozen.hidden_states_through(ids, through);
  }
  for (std::size_t j = 0; j < pair.layers.size(); ++j) fitters.at[j]->target = std::exchange(recorders.at[j]->output, Tensor());
  pair.model.hidden_states_through(ids, through);
}

// Each swapped layer's errors on the first `batches` validation batches.
std::vector<ErrorSummary> measure(Pair& pair, WrapScope<OutputRecorder>& recorders, WrapScope<FittingKernel>& fitters,
                                  const data::ValidationSet& val, int batches) {
  NoGradGuard no_grad;
  std::vector<std::vector<double>> errors(pair.layers.size());
  for (std::size_t j = 0; j < pair.layers.size(); ++j) fitters.at[j]->errors = &errors[j];
  const std::int64_t n = std::min<std::int64_t>(batches, val.num_batches());
  for (std::int64_t b = 0; b < n; ++b) run_batch(pair, recorders, fitters, inputs_of(val.batch(b)));
  std::vector<ErrorSummary> out;
  for (std::size_t j = 0; j < pair.layers.size(); ++j) {
    fitters.at[j]->errors = nullptr;
    out.push_back(summarise(errors[j]));
  }
  return out;
}

std::vector<int> swapped_layers(nn::CausalLM& model) {
  std::vector<int> layers;
  const auto kernels = model.attention_kernels();
  for (std::size_t i = 0; i < kernels.size(); ++i)
    if (std::string(kernels[i]->kind()) != "softmax") layers.push_back(static_cast<int>(i));
  return layers;
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

}  // namespace

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

nlohmann::json TransferReport::to_json() const {
  nlohmann::json layers_json = nlohmann::json::array();
  for (const LayerTransfer& l : layers)
    layers_json.push_back({{"layer", l.layer}, {"kind", l.kind}, {"error_before", summary_json(l.before)},
                           {"error_after", summary_json(l.after)}});
  return {{"steps", steps},           {"tokens_per_step", tokens_per_step}, {"ranks", ranks}, {"seconds", seconds},
          {"peak_resident_mib", peak_resident_mib},
          {"first_loss", first_loss}, {"last_loss", last_loss},             {"trainable", trainable},
          {"validation_at_swap", eval_json(at_swap)},  {"resumed_at", resumed_at},
          {"layers", layers_json}};
}

TransferReport run_transfer(nn::CausalLM& model, const RunConfig& config, const data::TrainLoader& loader,
                            const data::ValidationSet& val, dist::Communicator& comm, const TransferKeeping& keeping) {
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
  const std::vector<std::int64_t> intervals = redraw_intervals(config);

  TransferReport report;
  report.steps = tc.steps;
  report.ranks = world;
  report.tokens_per_step =
      static_cast<std::int64_t>(config.training.batch_size) * accum * world * config.data.seq_len;
  std::int64_t numel = 0;
  for (const auto& [name, p] : trainable) {
    report.trainable.push_back(name);
    numel += p->numel();
  }
  if (saved) {
    report.resumed_at = saved->step;
    report.at_swap = eval_from_json(saved->record.at("at_swap"));
    report.first_loss = saved->record.at("first_loss").get<double>();
  } else {
    set_feature_epochs(model, intervals, 0);
    report.at_swap = evaluate(model, val, config.training.eval_batches, comm);
  }
  spdlog::info("attention transfer: at swap, before it: val loss {:.4f} | accuracy {:.3f} ({} tokens)", report.at_swap.loss,
               report.at_swap.accuracy, report.at_swap.tokens);
  const Device device = trainable.front().second->device();
  std::unique_ptr<nn::CausalLM> frozen = frozen_copy(model, config, device);
  Pair both{model, *frozen, layers};
  const bool was_training = model.training();
  model.train(false);
  RequiresGradScope grads(model, trainable);
  WrapScope<OutputRecorder> recorders(*frozen, both.layers);
  WrapScope<FittingKernel> fitters(model, both.layers);

  std::string what;
  for (const std::string& e : tc.trainable) what += (what.empty() ? "" : ", ") + e;
  spdlog::info("attention transfer: {} swapped layer(s), {} step(s) of {} tokens, lr {:g}; {} tensor(s) ({} parameters) "
               "train: {}",
               both.layers.size(), tc.steps, report.tokens_per_step, tc.lr, trainable.size(), numel, what);

  Adam adam(trainable, tc.lr);
  std::vector<ErrorSummary> before;
  if (saved) {
    adam.restore(*saved);
    for (const nlohmann::json& e : saved->record.at("error_before")) before.push_back(summary_from_json(e));
    DARK_CHECK(before.size() == layers.size(), "attention transfer: the saved state measured ", before.size(),
               " layer(s), the model swaps ", layers.size());
    spdlog::info("attention transfer: continuing the saved transfer at step {}/{}", saved->step, tc.steps);
  } else {
    before = measure(both, recorders, fitters, val, tc.eval_batches);  // at feature epoch 0, set for the swap's evaluation
  }
  // The state --resume continues from: the parameters and moments after `done` steps.
  const auto save_state = [&](std::int64_t done) {
    if (keeping.run_dir.empty() || !keeping.writes) return;
    TransferState state;
    state.step = done;
    adam.save(state);
    nlohmann::json errors = nlohmann::json::array();
    for (const ErrorSummary& e : before) errors.push_back(summary_json(e));
    state.record = {{"at_swap", eval_json(report.at_swap)}, {"error_before", errors}, {"first_loss", report.first_loss}};
    save_transfer_state(keeping.run_dir, state, settings);
  };
  const auto loop_start = std::chrono::steady_clock::now();
  const std::int64_t first_step = report.resumed_at;
  // The gradients of the mean over the global batch: each micro-batch's loss scaled by
  // 1 / (grad_accum x ranks), the micro-batches' gradients added by backward, the ranks' by
  // an all-reduce; the logged loss is the global batch's.
  const double part = 1.0 / (static_cast<double>(accum) * world);
  for (std::int64_t step = first_step; step < tc.steps; ++step) {
    set_feature_epochs(model, intervals, step);
    Tensor step_loss = Tensor::full({1}, 0.0, DType::f64, Device::cpu());
    for (int micro = 0; micro < accum; ++micro) {
      run_batch(both, recorders, fitters, inputs_of(loader.batch(micro_batch_index(step, rank, world, accum, micro))));
      Tensor loss;
      for (FittingKernel* f : fitters.at) loss = loss.defined() ? add(loss, f->loss) : f->loss;
      for (FittingKernel* f : fitters.at) f->loss = Tensor();
      loss = mul_scalar(loss, part);
      backward(loss);
      step_loss = add(step_loss, loss.detach().to(Device::cpu()).to(DType::f64));
    }
    if (world > 1) {
      for (const auto& [name, p] : trainable)
        if (p->grad().defined()) comm.all_reduce(p->grad());
      step_loss = step_loss.to(comm.device());
      comm.all_reduce(step_loss);
    }
    const double value = step_loss.item();
    DARK_CHECK(std::isfinite(value), "attention transfer: the loss is ", value, " at step ", step + 1,
               " (lower finetune.transfer.lr)");
    adam.step();
    if (step == 0) report.first_loss = value;
    report.last_loss = value;
    const std::int64_t done = step + 1;
    if (done % std::max<std::int64_t>(1, config.training.log_interval) == 0 || done == tc.steps) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start).count();
      const double per_step = elapsed / static_cast<double>(done - first_step);
      spdlog::info("transfer step {:>5}/{} {} | loss {:.4f} (summed over layers) | {:.2f} s/step | ETA {}", done,
                   tc.steps, progress_bar(done, tc.steps), value, per_step,
                   duration_text(per_step * static_cast<double>(tc.steps - done)));
    }
    const bool stop = keeping.stop_requested && keeping.stop_requested();
    if (done < tc.steps && (stop || (tc.checkpoint_interval > 0 && done % tc.checkpoint_interval == 0))) save_state(done);
    if (stop && done < tc.steps) {
      spdlog::info("attention transfer: stopped by a signal at step {}/{}; its state is in {}; continue with --resume",
                   done, tc.steps, (keeping.run_dir / "transfer").string());
      model.train(was_training);
      report.stopped = true;
      return report;
    }
  }
  set_feature_epochs(model, intervals, 0);
  const std::vector<ErrorSummary> after = measure(both, recorders, fitters, val, tc.eval_batches);
  model.train(was_training);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.peak_resident_mib = static_cast<double>(peak_resident_bytes()) / (1 << 20);
  for (std::size_t j = 0; j < both.layers.size(); ++j) {
    report.layers.push_back({both.layers[j], fitters.at[j]->inner->kind(), before[j], after[j]});
    spdlog::info("attention transfer: layer {:>2} ({}): relative error mean {:.3f} -> {:.3f}, median {:.3f} -> {:.3f}",
                 both.layers[j], fitters.at[j]->inner->kind(), before[j].mean, after[j].mean, before[j].median,
                 after[j].median);
  }
  if (!keeping.run_dir.empty() && keeping.writes) remove_transfer_state(keeping.run_dir);
  spdlog::info("attention transfer: done in {}{}; peak resident set so far {:.0f} MiB", duration_text(report.seconds),
               report.resumed_at ? str(" (continued at step ", report.resumed_at, ")") : std::string(),
               report.peak_resident_mib);
  return report;
}

}  // namespace dark::train
