// The training loop (see trainer.h). The main path is `train()`; everything it calls is
// small and named for what it does.
#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "nn/generate.h"
#include "nn/optim.h"
#include "nn/parameter_buffer.h"
#include "nn/schedule.h"
#include "train/checkpoint.h"
#include "core/file_io.h"
#include "train/finetune.h"
#include "train/model_builder.h"
#include "train/stability.h"

namespace dark::train {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

EvalMetrics evaluate(nn::CausalLM& model, const data::ValidationSet& val, std::int64_t max_batches) {
  NoGradGuard no_grad;
  const bool was_training = model.training();
  model.train(false);
  const std::int64_t batches = max_batches > 0 ? std::min(max_batches, val.num_batches()) : val.num_batches();
  double loss_sum = 0;
  std::int64_t correct = 0, count = 0;
  const std::int64_t V = model.config().vocab_size;
  for (std::int64_t b = 0; b < batches; ++b) {
    const Tensor tokens = val.batch(b);
    const std::int64_t B = tokens.size(0), T = tokens.size(1) - 1;
    const Tensor logits = model.forward(core::slice(tokens, 1, 0, T).contiguous());
    const Tensor targets = core::reshape(core::slice(tokens, 1, 1, T + 1).contiguous(), {B * T});
    loss_sum += cross_entropy(reshape(logits, {B * T, V}), targets).item() * static_cast<double>(B * T);
    // Top-1 accuracy on the host: the logits are already in CPU memory for CPU runs.
    const std::vector<float> l = logits.to(DType::f32).to_vector<float>();
    const std::vector<std::int32_t> t = targets.to_vector<std::int32_t>();
    for (std::int64_t row = 0; row < B * T; ++row) {
      const float* r = l.data() + row * V;
      correct += std::max_element(r, r + V) - r == t[row];
    }
    count += B * T;
  }
  model.train(was_training);
  EvalMetrics m;
  m.tokens = count;
  m.loss = count ? loss_sum / static_cast<double>(count) : 0.0;
  m.perplexity = std::exp(m.loss);
  m.accuracy = count ? static_cast<double>(correct) / static_cast<double>(count) : 0.0;
  return m;
}

namespace {

// Appends one JSON object per line and flushes, so a killed run keeps every line written.
class MetricsLog {
 public:
  MetricsLog(const fs::path& path, std::int64_t keep_up_to_step) : path_(path) {
    // On resume, drop lines for steps after the checkpoint: they are about to be redone.
    if (keep_up_to_step >= 0 && fs::exists(path_)) {
      std::ifstream in(path_);
      std::ostringstream kept;
      for (std::string line; std::getline(in, line);) {
        if (line.empty()) continue;
        const json j = json::parse(line, nullptr, false);
        if (!j.is_discarded() && j.value("step", std::int64_t{0}) <= keep_up_to_step) kept << line << '\n';
      }
      write_file_atomic(path_, kept.str());
    } else if (keep_up_to_step < 0) {
      write_file_atomic(path_, "");
    }
    out_.open(path_, std::ios::app);
    DARK_CHECK(out_.good(), "cannot open ", path_.string(), " for writing");
  }
  void write(const json& j) {
    out_ << j.dump() << '\n';
    out_.flush();
  }

 private:
  fs::path path_;
  std::ofstream out_;
};

std::string format_duration(double seconds) {
  const auto s = static_cast<std::int64_t>(seconds);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600), static_cast<long long>(s % 3600 / 60));
  else std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

std::string progress_bar(std::int64_t done, std::int64_t total, int width = 20) {
  const auto ratio = static_cast<double>(done) / static_cast<double>(std::max<std::int64_t>(total, 1));
  const int filled = std::clamp(static_cast<int>(ratio * width), 0, width);
  std::string bar(static_cast<std::size_t>(width) + 2, '.');
  bar.front() = '[';
  bar.back() = ']';
  std::fill_n(bar.begin() + 1, filled, '#');
  return bar;
}

// Everything a checkpoint stores beyond tensors: enough to continue bit-exactly.
json trainer_state(const RunConfig& config, std::int64_t consecutive_skips, std::int64_t skipped_total) {
  return {{"config", to_json(config)},
          {"consecutive_skips", consecutive_skips},
          {"skipped_steps", skipped_total},
          // Data order and dropout masks are pure functions of (seed, step): nothing else to save.
          {"data_position", {{"kind", "step"}, {"seed", config.seed}}}};
}

// "model.layers.<i>.self_attn.feature_map." + name: where attention state lives in checkpoints.
std::string feature_map_prefix(std::size_t layer) {
  return "model.layers." + std::to_string(layer) + ".self_attn.feature_map.";
}

std::map<std::string, Tensor> attention_state_map(nn::CausalLM& model) {
  std::map<std::string, Tensor> out;
  const auto kernels = model.attention_kernels();
  for (std::size_t i = 0; i < kernels.size(); ++i)
    for (auto& [name, t] : kernels[i]->extra_state()) out[feature_map_prefix(i) + name] = t;
  return out;
}

void load_attention_state(nn::CausalLM& model, const std::map<std::string, Tensor>& saved) {
  const auto kernels = model.attention_kernels();
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    const std::string prefix = feature_map_prefix(i);
    std::map<std::string, Tensor> mine;
    for (const auto& [name, t] : saved)
      if (name.rfind(prefix, 0) == 0) mine[name.substr(prefix.size())] = t;
    kernels[i]->load_extra_state(mine);
  }
}

// Each layer's attention.redraw_interval (its overrides applied): read once per run, since
// resolving overrides goes through the config schema.
std::vector<std::int64_t> redraw_intervals(const RunConfig& config) {
  std::vector<std::int64_t> out;
  for (int layer = 0; layer < config.model.n_layers; ++layer) out.push_back(attention_for_layer(config, layer).redraw_interval);
  return out;
}

// Random features are a function of (seed, layer, head, epoch) with epoch = step / interval:
// every rank, and a resumed run, draws the same matrices at the same step.
void set_feature_epochs(nn::CausalLM& model, const std::vector<std::int64_t>& intervals, std::int64_t step) {
  const auto kernels = model.attention_kernels();
  for (std::size_t i = 0; i < kernels.size(); ++i)
    kernels[i]->set_feature_epoch(intervals[i] > 0 ? step / intervals[i] : 0);
}

// DARKFormer's whiten initialisation and the variance-optimal proposal measure the queries
// and keys of the first attention.calibration_batches training batches (eval mode, no
// gradient) before the first step of a fresh run.
void calibrate_attention(nn::CausalLM& model, const RunConfig& config, const data::TrainLoader& loader) {
  std::vector<nn::AttentionKernel*> needing;
  int batches = 0;
  const auto kernels = model.attention_kernels();
  for (std::size_t i = 0; i < kernels.size(); ++i)
    if (kernels[i]->needs_calibration()) {
      needing.push_back(kernels[i]);
      batches = std::max(batches, attention_for_layer(config, static_cast<int>(i)).calibration_batches);
    }
  if (needing.empty()) return;
  spdlog::info("calibrating attention of {} layer(s) on {} training batch(es)", needing.size(), batches);
  NoGradGuard no_grad;
  model.train(false);
  for (nn::AttentionKernel* k : needing) k->begin_calibration();
  for (int b = 0; b < batches; ++b) {
    const Tensor tokens = loader.batch(b);
    model.forward(core::slice(tokens, 1, 0, tokens.size(1) - 1).contiguous());
  }
  for (nn::AttentionKernel* k : needing) k->end_calibration();
  model.train(true);
}

// A finetuned model must read the tokens it was trained on: the same tokenizer as its source.
void check_source_tokenizer(const InitSource& source, const RunConfig& config, const data::PreparedData& data) {
  if (source.data_dir.empty()) {  // a GGUF model: its own tokenizer
    DARK_CHECK(config.data.tokenizer == TokenizerKind::gguf, "config: data.tokenizer: a GGUF model (",
               source.path, ") reads the ids of its own tokenizer: use \"gguf\" (the default with a .gguf init_from)");
    return;
  }
  if (!fs::exists(fs::path(source.data_dir) / "meta.json")) {
    spdlog::warn("init_from: {} was trained on {}, which no longer exists; cannot check that the tokenizers agree",
                 source.description, source.data_dir);
    return;
  }
  const std::string theirs = data::open_prepared(source.data_dir).tokenizer->hash();
  DARK_CHECK(theirs == data.tokenizer->hash(), "init_from: ", source.description, " was trained with tokenizer ", theirs,
             " (", source.data_dir, "), this run's data uses ", data.tokenizer->hash(), " (", config.data.dir,
             "): the token ids would not mean the same");
}

std::map<std::string, Tensor> named_parameters_map(nn::CausalLM& model) {
  std::map<std::string, Tensor> out;
  for (auto& [name, p] : model.named_parameters()) out[name] = *p;
  return out;
}

}  // namespace

// Copies checkpoint tensors into the model's parameters, checking names and shapes.
void load_trained_state(nn::CausalLM& model, const CheckpointData& checkpoint, const RunConfig& config,
                        const std::string& source) {
  load_parameters(model, checkpoint.model, source);
  load_attention_state(model, checkpoint.attention);
  set_feature_epochs(model, redraw_intervals(config), checkpoint.step);
}

void load_parameters(nn::CausalLM& model, const std::map<std::string, Tensor>& saved, const std::string& source) {
  NoGradGuard no_grad;
  auto params = model.named_parameters();
  for (auto& [name, p] : params) {
    auto it = saved.find(name);
    DARK_CHECK(it != saved.end(), source, ": parameter '", name, "' is missing");
    DARK_CHECK(it->second.shape() == p->shape(), source, ": parameter '", name, "' has shape ",
               shape_str(it->second.shape()), ", the model expects ", shape_str(p->shape()));
    p->copy_(it->second);
  }
  DARK_CHECK(saved.size() == params.size(), source, ": holds ", saved.size(), " tensors, the model has ",
             params.size(), " parameters");
}

TrainResult train(RunConfig config, const TrainOptions& options) {
  const auto t_start = Clock::now();
  const fs::path run_dir = config.output.dir;
  const auto& tc = config.training;

  // ---- fresh start, finetuning start or resume ----
  std::optional<CheckpointData> resumed;
  std::optional<RunConfig> resumed_config;  // the config the checkpoint was trained with
  std::optional<InitSource> source;
  fs::path resumed_from;
  if (options.resume) {
    const auto latest = latest_checkpoint(run_dir);
    DARK_CHECK(latest.has_value(), "--resume: no checkpoint in ", (run_dir / "checkpoints").string());
    resumed_from = *latest;
    resumed = load_checkpoint(resumed_from);
    resumed_config = parse_config(resumed->state.at("config"));
    // The weights come from the checkpoint; its config already holds the source's shape.
    if (!config.finetune.init_from.empty()) adopt_architecture(config, resumed_config->model, "the checkpoint's config");
  } else if (!config.finetune.init_from.empty()) {
    source = load_init_source(config.finetune.init_from);
    adopt_architecture(config, source->model, source->description);
  }
  data::PreparedData data = prepare_data_for(config);
  validate_config(config);
  if (source) check_source_tokenizer(*source, config, data);
  if (resumed) {
    json a = to_json(*resumed_config), b = to_json(config);
    // Extending a run (training.steps) and moving its folder (output.dir) are allowed.
    for (json* j : {&a, &b}) (*j)["training"].erase("steps"), j->erase("output");
    DARK_CHECK(a == b, "--resume: the config differs from the one checkpoint ", resumed_from.filename().string(),
               " was trained with (only training.steps and output.dir may change); see ",
               (run_dir / "config.json").string());
    spdlog::info("resuming from {} (step {})", resumed_from.string(), resumed->step);
  } else {
    DARK_CHECK(list_checkpoints(run_dir).empty(), "run folder ", run_dir.string(),
               " already has checkpoints: pass --resume to continue it, or set output.dir to a new folder");
  }
  fs::create_directories(run_dir);
  write_resolved(config, run_dir);
  spdlog::info("config:\n{}", config_table(config));

  // ---- model, optimizer, data streams ----
  std::unique_ptr<nn::CausalLM> model = build_model(config);
  if (source) load_source_weights(*model, *source);
  source.reset();  // the model holds the weights now
  const Freezing freezing = freeze_parameters(*model, config.finetune.trainable);
  if (!freezing.frozen.empty())
    spdlog::info("finetune.trainable: {} of {} parameters train ({} tensors); {} frozen save {:.1f} MiB of gradients and "
                 "optimizer state",
                 freezing.trainable_numel, freezing.trainable_numel + freezing.frozen_numel, freezing.trainable.size(),
                 freezing.frozen_numel, static_cast<double>(frozen_bytes_saved(freezing, config)) / (1 << 20));
  nn::ParameterBuffer params(freezing.trainable);
  nn::Optimizer optimizer(params, optimizer_config(config));
  const nn::ScheduleConfig schedule = schedule_config(config);
  std::int64_t step = 0, consecutive_skips = 0, skipped_total = 0;
  if (resumed) {
    load_parameters(*model, resumed->model, "checkpoint " + checkpoint_name(resumed->step));
    optimizer.load_state(resumed->optimizer);
    step = resumed->step;
    load_attention_state(*model, resumed->attention);
    consecutive_skips = resumed->state.value("consecutive_skips", std::int64_t{0});
    skipped_total = resumed->state.value("skipped_steps", std::int64_t{0});
  }
  data::LoaderOptions lo;
  lo.batch_size = tc.batch_size;
  lo.seq_len = config.data.seq_len;
  lo.seed = config.seed;
  const data::TrainLoader loader(data.open_shard(data::Split::train), lo);
  const data::ValidationSet val(data.open_shard(data::Split::val), tc.batch_size, config.data.seq_len,
                                config.data.val_windows);
  spdlog::info("model: {} parameters ({} layers, d_model {}, {} heads, attention {}); data: {} train tokens, {} val windows",
               model->num_parameters(), config.model.n_layers, config.model.d_model, config.model.n_heads,
               enum_name(config.attention.kind), data.train_tokens, val.num_windows());

  if (!resumed) calibrate_attention(*model, config, loader);
  const std::vector<std::int64_t> intervals = redraw_intervals(config);
  set_feature_epochs(*model, intervals, step);

  MetricsLog metrics(run_dir / "metrics.jsonl", resumed ? step : -1);
  // Sees every metrics line (a resumed run's earlier ones first) for stability.json.
  StabilityMonitor stability(stability_options(config), read_metrics(run_dir / "metrics.jsonl"));
  // Writes a metrics line; true when stability.stop_on_divergence should end the run now.
  auto log_metrics = [&](const json& line) {
    metrics.write(line);
    return stability.observe(line) && config.stability.stop_on_divergence;
  };
  auto save = [&](std::int64_t at_step) {
    CheckpointData ck;
    ck.step = at_step;
    ck.model = named_parameters_map(*model);
    ck.optimizer = optimizer.state();
    ck.attention = attention_state_map(*model);
    ck.state = trainer_state(config, consecutive_skips, skipped_total);
    json epochs = json::array();
    for (nn::AttentionKernel* k : model->attention_kernels()) epochs.push_back(k->feature_epoch());
    ck.state["feature_epochs"] = epochs;  // informative: the epochs are a function of the step
    const fs::path where = save_checkpoint(run_dir, ck, tc.keep_checkpoints);
    spdlog::info("checkpoint {}", where.string());
  };
  auto run_eval = [&](std::int64_t at_step) {
    const EvalMetrics m = evaluate(*model, val, tc.eval_batches);
    spdlog::info("eval step {} | val loss {:.4f} | ppl {:.2f} | next-token acc {:.4f}", at_step, m.loss, m.perplexity, m.accuracy);
    log_metrics({{"step", at_step}, {"eval_loss", m.loss}, {"eval_perplexity", m.perplexity},
                   {"eval_accuracy", m.accuracy}, {"eval_tokens", m.tokens}});
    return m;
  };

  // A finetuning run first measures where it starts: the source's weights under this run's
  // attention (the cost of the swap before any training).
  if (!resumed && !config.finetune.init_from.empty()) run_eval(0);

  // ---- the loop ----
  const std::int64_t tokens_per_step = static_cast<std::int64_t>(tc.batch_size) * tc.grad_accum * config.data.seq_len;
  const std::int64_t first_step = step;
  double timed_seconds = 0, last_loss = 0;
  std::int64_t timed_steps = 0;
  const auto loop_start = Clock::now();
  model->train(true);
  for (; step < tc.steps; ++step) {
    if (options.before_step) {
      NoGradGuard no_grad;
      options.before_step(step, *model);
    }
    set_feature_epochs(*model, intervals, step);  // redraws happen on optimizer steps, in training only
    const auto t0 = Clock::now();
    const double lr = nn::learning_rate_at(schedule, config.optimizer.lr, step);
    params.zero_grad();
    double loss_value = 0;
    for (int micro = 0; micro < tc.grad_accum; ++micro) {
      const Tensor batch = loader.batch(step * tc.grad_accum + micro);
      Tensor loss = model->loss(batch, static_cast<std::uint64_t>(step * tc.grad_accum + micro));
      if (tc.grad_accum > 1) loss = mul_scalar(loss, 1.0 / tc.grad_accum);
      backward(loss);
      loss_value += loss.item();
    }
    const double grad_norm = params.grad_norm();
    const bool finite = std::isfinite(loss_value) && std::isfinite(grad_norm);
    if (!finite) {
      ++consecutive_skips, ++skipped_total;
      spdlog::warn("step {}: non-finite {} ({}); update skipped ({} in a row, limit {})", step + 1,
                   std::isfinite(loss_value) ? "gradient norm" : "loss", std::isfinite(loss_value) ? grad_norm : loss_value,
                   consecutive_skips, tc.max_consecutive_skips);
      if (log_metrics({{"step", step + 1}, {"skipped", true}, {"loss", std::isfinite(loss_value) ? json(loss_value) : json(nullptr)}}))
        break;
      DARK_CHECK(consecutive_skips <= tc.max_consecutive_skips, "training diverged: ", consecutive_skips,
                 " consecutive steps with a non-finite loss or gradient (training.max_consecutive_skips = ",
                 tc.max_consecutive_skips, "); last good checkpoint in ", (run_dir / "checkpoints").string());
      continue;
    }
    consecutive_skips = 0;
    if (config.optimizer.grad_clip > 0 && grad_norm > config.optimizer.grad_clip)
      params.scale_grads(config.optimizer.grad_clip / grad_norm);
    optimizer.step(lr);
    last_loss = loss_value;

    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (step > first_step) timed_seconds += seconds, ++timed_steps;  // the first step warms caches
    const double tok_per_s = timed_steps ? static_cast<double>(tokens_per_step) * timed_steps / timed_seconds : 0.0;
    const double elapsed = std::chrono::duration<double>(Clock::now() - loop_start).count();
    if (log_metrics({{"step", step + 1}, {"loss", loss_value}, {"lr", lr}, {"grad_norm", grad_norm},
                     {"tokens_per_s", tok_per_s}, {"step_ms", seconds * 1e3}, {"elapsed_s", elapsed}}))
      break;
    const bool last = step + 1 == tc.steps;
    if ((step + 1) % tc.log_interval == 0 || step == first_step || last) {
      const double eta = timed_steps ? timed_seconds / timed_steps * static_cast<double>(tc.steps - step - 1) : 0.0;
      spdlog::info("{} step {}/{} | loss {:.4f} | grad norm {:.3f} | lr {:.2e} | {:.0f} ms | {:.0f} tok/s | ETA {}",
                   progress_bar(step + 1, tc.steps), step + 1, tc.steps, loss_value, grad_norm, lr, seconds * 1e3,
                   tok_per_s, format_duration(eta));
    }
    if ((step + 1) % tc.eval_interval == 0 && !last) run_eval(step + 1);
    if (tc.checkpoint_interval > 0 && (step + 1) % tc.checkpoint_interval == 0 && !last) save(step + 1);
  }

  TrainResult result;
  result.steps = step;
  result.final_train_loss = last_loss;
  result.run_dir = run_dir.string();
  if (step < tc.steps) {  // stopped on divergence: the weights are not worth evaluating or keeping
    StabilityReport report = stability.report();
    report.stopped_on_divergence = true;
    write_stability(run_dir, report);
    spdlog::warn("training diverged at step {} ({}); stopped early (stability.stop_on_divergence), no checkpoint written",
                 report.divergence_step, report.divergence_reason);
    return result;
  }
  result.final_eval = run_eval(step);
  save(step);
  write_stability(run_dir, stability.report());
  if (tc.generate_tokens > 0) {
    nn::GenerateOptions g;
    g.max_tokens = tc.generate_tokens;
    g.seed = config.seed;
    g.context = config.data.seq_len;
    std::vector<std::int32_t> prompt = data.tokenizer->encode(tc.generate_prompt);
    if (prompt.empty()) prompt.push_back(data.tokenizer->eos_id());
    const auto out = nn::generate(*model, prompt, g);
    const std::string text = tc.generate_prompt + data.tokenizer->decode(out);
    write_file_atomic(run_dir / "sample.txt", text + "\n");
    spdlog::info("sample (temperature {}, top-k {}):\n{}", g.temperature, g.top_k, text);
  }
  spdlog::info("done: {} steps in {}, final train loss {:.4f}, val loss {:.4f}, run folder {}", step,
               format_duration(std::chrono::duration<double>(Clock::now() - t_start).count()), last_loss,
               result.final_eval.loss, run_dir.string());
  return result;
}

}  // namespace dark::train
