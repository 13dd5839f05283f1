// The training loop (see trainer.h). train() reads top to bottom: set up the run, take
// optimizer steps (logging each, evaluating and checkpointing on their intervals), then
// finish it. What a step does is in train_step.cpp; set-up and checkpoints in
// training_run.cpp; what the run reports as it goes is RunLog below.
#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <optional>

#include "autograd/grad_mode.h"
#include "core/cpu/float_mode.h"
#include "core/file_io.h"
#include "nn/generate.h"
#include "train/attention_state.h"
#include "train/ablation.h"
#include "train/evaluate.h"
#include "train/metrics/metrics_log.h"
#include "train/mqar_eval.h"
#include "train/progress.h"
#include "train/recall_evaluation.h"
#include "train/run_events.h"
#include "train/metrics/stability.h"
#include "train/stop_signal.h"
#include "train/train_step.h"

namespace dark::train {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

// "1-64 3.214 | 65-256 2.871": each bucket's loss, for the log lines.
std::string by_position_text(const metrics::ByPosition& buckets) {
  std::string out;
  for (const metrics::BucketMetrics& b : buckets) out += fmt::format("{}{} {:.4f}", out.empty() ? "" : " | ", b.bucket, b.loss);
  return out;
}

// What a run reports as it goes: metrics.jsonl, the stability monitor that follows it, and
// the step line people read (every training.log_interval steps, speed without the first step).
// Every rank follows the metrics (they are the same everywhere: losses and gradient norms
// are reduced over the ranks), so every rank takes the same stop decisions; rank 0 alone
// writes them.
class RunLog {
 public:
  explicit RunLog(const TrainingRun& run)
      : metrics_(open_metrics(run)),
        events_(run),
        // Sees every metrics line (a resumed run's earlier ones first) for stability.json.
        stability_(stability_options(run.config), metrics::read_metrics(run.dir / "metrics.jsonl")),
        first_step_(run.step),
        tokens_per_step_(static_cast<std::int64_t>(run.config.training.batch_size) * run.config.training.grad_accum *
                         run.world_size() * run.config.data.seq_len),
        loop_start_(Clock::now()) {}

  // Logs step run.step (just taken) with the attention statistics measured during it (empty
  // but on log steps); true when stability.stop_on_divergence ends the run now.
  bool step(const TrainingRun& run, const StepResult& r, const std::vector<nn::AttentionStats>& attention) {
    return r.applied ? applied_step(run, r, attention) : skipped_step(run, r);
  }

  // Step run.step + 1 trains with redrawn features: measures what the redraw alone does (the
  // same validation batches, weights fixed, with the old features and the new; see
  // train/metrics/redraw_shock.h) and records the redraw. Leaves the new features in place.
  void redraw(TrainingRun& run) {
    const int batches = run.config.stability.redraw_eval_batches;
    EvalMetrics before, after;
    if (batches > 0) {
      set_feature_epochs(*run.model, run.redraw_intervals, run.step - 1);
      before = evaluate(*run.model, *run.val, batches, *run.comm);
    }
    set_feature_epochs(*run.model, run.redraw_intervals, run.step);
    if (batches > 0) after = evaluate(*run.model, *run.val, batches, *run.comm);
    std::int64_t epoch = 0;
    for (const nn::AttentionKernel* k : run.model->attention_kernels())
      if (k->redraws_features()) epoch = std::max(epoch, k->feature_epoch());
    write(run, {{"step", run.step + 1}, {"redraw", metrics::redraw_json(epoch, before.loss, after.loss, after.tokens)}});
    if (batches > 0)
      spdlog::info("features redrawn for step {} (epoch {}): held-out loss {:.4f} -> {:.4f} ({:+.4f})", run.step + 1, epoch,
                   before.loss, after.loss, after.loss - before.loss);
  }

  // Evaluates the model on the validation set and logs the result at step run.step, with its
  // loss by position; with `ablations`, also window only and features only (train/ablation.h)
  // on the same batches, in the same line.
  EvalMetrics eval(TrainingRun& run, bool ablations = false) {
    const std::int64_t batches = run.config.training.eval_batches;
    const EvalMetrics m = evaluate(*run.model, *run.val, batches, *run.comm);
    spdlog::info("eval step {} | val loss {:.4f} | ppl {:.2f} | next-token acc {:.4f} | by position {}", run.step, m.loss,
                 m.perplexity, m.accuracy, by_position_text(m.by_position));
    json line = {{"step", run.step},         {"eval_loss", m.loss},  {"eval_perplexity", m.perplexity},
                 {"eval_accuracy", m.accuracy}, {"eval_tokens", m.tokens},
                 {"eval_by_position", metrics::by_position_json(m.by_position)}};
    if (run.mqar_val) {  // data.task mqar: recall accuracy over the whole validation set
      mqar_ = evaluate_mqar(*run.model, *run.mqar_val, run.comm.get());
      spdlog::info("eval step {} | MQAR recall accuracy {:.4f} ({} / {} queries)\n{}", run.step, mqar_->all.accuracy(),
                   mqar_->all.correct, mqar_->all.queries, mqar_table(*mqar_));
      line["mqar"] = mqar_json(*mqar_);
    }
    if (ablations) {
      for (const Ablation a : {Ablation::window_only, Ablation::features_only}) {
        const EvalMetrics ablated = evaluate_ablated(*run.model, *run.val, batches, a, run.comm.get());
        spdlog::info("eval step {} {} | val loss {:.4f} ({:+.4f}) | next-token acc {:.4f} | by position {}", run.step,
                     ablation_name(a), ablated.loss, ablated.loss - m.loss, ablated.accuracy,
                     by_position_text(ablated.by_position));
        line["eval_ablation"][ablation_name(a)] = eval_metrics_json(ablated);
      }
    }
    write(run, line);
    return m;
  }

  // The end-of-run sample, as text in the event file.
  void sample(std::int64_t step, const std::string& text) { events_.text("sample", step, text); }
  // The recall tasks of evaluation.passkey / evaluation.copy (rank 0): their JSON files, and
  // their results as a metrics line at run.step.
  void recall(TrainingRun& run) {
    nlohmann::json fields = run_recall_evaluation(*run.model, run.config, *run.data.tokenizer,
                                                  run.data.window_bos_id >= 0, run.dir, run.step);
    if (fields.empty()) return;
    fields["step"] = run.step;
    write(run, fields);
  }
  // stability.json of the run (rank 0), its spikes and divergence also in the event file.
  void write_stability(const TrainingRun& run, const metrics::StabilityReport& report) {
    metrics::write_stability(run.dir, report);
    events_.stability(report);
  }

  metrics::StabilityReport stability_report() const { return stability_.report(); }
  // data.task mqar: the latest evaluation's recall report.
  const std::optional<MqarReport>& mqar() const { return mqar_; }
  double last_loss() const { return last_loss_; }

 private:
  // Rank 0's metrics.jsonl (a resumed run's cut back to its checkpoint), opened before any
  // rank reads the file's earlier lines.
  static std::optional<metrics::MetricsLog> open_metrics(const TrainingRun& run) {
    std::optional<metrics::MetricsLog> log;
    if (run.writes()) log.emplace(run.dir / "metrics.jsonl", run.resumed ? run.step : -1);
    run.comm->barrier();
    return log;
  }

  bool write(const TrainingRun& run, const json& line) {
    if (metrics_) metrics_->write(line);
    events_.line(line);
    return stability_.observe(line) && run.config.stability.stop_on_divergence;
  }

  bool applied_step(const TrainingRun& run, const StepResult& r, const std::vector<nn::AttentionStats>& attention) {
    const TrainingConfig& tc = run.config.training;
    const std::int64_t index = run.step - 1;  // 0-based
    last_loss_ = r.loss;
    if (index > first_step_) timed_seconds_ += r.seconds, ++timed_steps_;  // the first step warms caches
    const double tok_per_s =
        timed_steps_ ? static_cast<double>(tokens_per_step_) * static_cast<double>(timed_steps_) / timed_seconds_ : 0.0;
    const double elapsed = std::chrono::duration<double>(Clock::now() - loop_start_).count();
    json line = {{"step", run.step},         {"loss", r.loss},           {"lr", r.lr},
                 {"grad_norm", r.grad_norm}, {"tokens_per_s", tok_per_s}, {"step_ms", r.seconds * 1e3},
                 {"elapsed_s", elapsed}};
    // Communication not hidden behind backward (rank 0's wait), with several ranks.
    if (run.parallel) line["comm_wait_ms"] = r.comm_wait_seconds * 1e3;
    line["peak_mem_mib"] = static_cast<double>(r.peak_bytes) / (1024.0 * 1024.0);
    if (!attention.empty()) line["attention_stats"] = metrics::attention_stats_json(attention);
    if (write(run, line)) return true;
    if (run.step % tc.log_interval == 0 || index == first_step_ || run.step == tc.steps) {
      // Before any timed step (the first one warms the caches and is left out of the rates),
      // that step's own time stands in for the rate and the ETA, marked as such: an upper
      // estimate rather than "0 tok/s | ETA 0s".
      const bool untimed = timed_steps_ == 0 && r.seconds > 0;
      const double per_step = untimed ? r.seconds : timed_steps_ ? timed_seconds_ / static_cast<double>(timed_steps_) : 0.0;
      const double shown_rate = untimed ? static_cast<double>(tokens_per_step_) / r.seconds : tok_per_s;
      spdlog::info("{} step {}/{} | loss {:.4f} | grad norm {:.3f} | lr {:.2e} | {:.0f} ms | {:.0f} tok/s{} | ETA {}{}",
                   progress_bar(run.step, tc.steps), run.step, tc.steps, r.loss, r.grad_norm, r.lr, r.seconds * 1e3,
                   shown_rate, untimed ? " (first step)" : "", untimed && run.step < tc.steps ? "<= " : "",
                   duration_text(per_step * static_cast<double>(tc.steps - run.step)));
    }
    return false;
  }

  bool skipped_step(const TrainingRun& run, const StepResult& r) {
    const bool loss_finite = std::isfinite(r.loss);
    spdlog::warn("step {}: non-finite {} ({}); update skipped ({} in a row, limit {})", run.step,
                 loss_finite ? "gradient norm" : "loss", loss_finite ? r.grad_norm : r.loss, run.consecutive_skips,
                 run.config.training.max_consecutive_skips);
    return write(run, {{"step", run.step}, {"skipped", true}, {"loss", loss_finite ? json(r.loss) : json(nullptr)}});
  }

  std::optional<metrics::MetricsLog> metrics_;  // rank 0
  RunEvents events_;                             // rank 0, with output.tensorboard
  metrics::StabilityMonitor stability_;
  std::int64_t first_step_;
  std::int64_t tokens_per_step_;
  Clock::time_point loop_start_;
  std::optional<MqarReport> mqar_;
  double timed_seconds_ = 0, last_loss_ = 0;
  std::int64_t timed_steps_ = 0;
};

// Too many non-finite steps in a row end the run with an error (the last checkpoint stays).
void check_skip_limit(const TrainingRun& run) {
  const int limit = run.config.training.max_consecutive_skips;
  DARK_CHECK(run.consecutive_skips <= limit, "training diverged: ", run.consecutive_skips,
             " consecutive steps with a non-finite loss or gradient (training.max_consecutive_skips = ", limit,
             "); last good checkpoint in ", (run.dir / "checkpoints").string());
}

// stability.stop_on_divergence ended the run: the weights are not worth evaluating or keeping.
void stop_diverged(const TrainingRun& run, RunLog& log) {
  metrics::StabilityReport report = log.stability_report();
  report.stopped_on_divergence = true;
  if (run.writes()) log.write_stability(run, report);
  spdlog::warn("training diverged at step {} ({}); stopped early (stability.stop_on_divergence), no checkpoint written",
               report.divergence_step, report.divergence_reason);
}

// training.generate_tokens of text after training.generate_prompt, into sample.txt; returns it.
std::string write_sample(TrainingRun& run) {
  const TrainingConfig& tc = run.config.training;
  nn::GenerateOptions g;
  g.max_tokens = tc.generate_tokens;
  g.seed = run.config.seed;
  // The model's own context (nn::CausalLM::decode_context), not the training windows'.
  g.on_notice = [](const std::string& line) { spdlog::info("{}", line); };
  const data::Tokenizer& tokenizer = *run.data.tokenizer;
  const std::vector<std::int32_t> prompt =
      data::encode_prompt(tokenizer, tc.generate_prompt, run.data.window_bos_id >= 0);
  const std::string text = tc.generate_prompt + tokenizer.decode(nn::generate(*run.model, prompt, g));
  write_file_atomic(run.dir / "sample.txt", text + "\n");
  spdlog::info("sample (temperature {}, top-k {}):\n{}", g.temperature, g.top_k, text);
  return text;
}

// A stop signal ended the run between two steps: checkpoint the step reached (unless that
// checkpoint exists) so that --resume continues exactly where it stopped.
void stop_by_signal(TrainingRun& run, std::int64_t saved_step) {
  if (saved_step != run.step) save_run(run);
  const int sig = StopSignals::received();
  spdlog::info("stopped by signal at step {}; continue with --resume ({}; checkpoint in {})", run.step,
               sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "another rank received a signal",
               (run.dir / "checkpoints" / formats::checkpoint_name(run.step)).string());
}

// The end of a run that reached training.steps: final evaluation and checkpoint,
// stability.json, a sample.
EvalMetrics finish(TrainingRun& run, RunLog& log) {
  const EvalMetrics final_eval = log.eval(run, run.config.evaluation.ablation);
  save_run(run);
  if (!run.writes()) return final_eval;
  log.write_stability(run, log.stability_report());
  if (run.config.data.task == data::DataTask::mqar) {
    // No tokenizer: no text sample, no text prompts. The final recall report goes beside the metrics.
    if (run.config.training.generate_tokens > 0)
      spdlog::info("data.task mqar: no text sample at the end (training.generate_tokens ignored: the task has no "
                   "tokenizer)");
    if (log.mqar()) write_file_atomic(run.dir / "mqar.json", mqar_file_json(*log.mqar(), run.step).dump(2) + "\n");
    return final_eval;
  }
  if (run.config.training.generate_tokens > 0) log.sample(run.step, write_sample(run));
  log.recall(run);
  return final_eval;
}

}  // namespace

namespace {
TrainResult train_without_memory_advice(RunConfig config, const TrainOptions& options);
}  // namespace

TrainResult train(RunConfig config, const TrainOptions& options) {
  const TrainingConfig t = config.training;
  const std::int64_t seq_len = config.data.seq_len;
  const StopSignals signals;  // from here a signal waits for the end of a step
  const cpu::FlushDenormalsScope denormals(t.flush_denormals);  // the transfer's steps and evaluations too
  try {
    return train_without_memory_advice(std::move(config), options);
  } catch (const OutOfMemory& e) {
    // The device's numbers come from core; what shrinks a step's memory is the config's.
    throw OutOfMemory(str(e.what(), ". Settings that shrink a step's memory: training.batch_size (now ", t.batch_size,
                          "; training.grad_accum keeps the global batch), data.seq_len (now ", seq_len, ")",
                          t.activation_checkpointing ? "" : ", training.activation_checkpointing true",
                          t.precision == Precision::bf16 ? "" : ", training.precision bf16 (GPUs)",
                          ", a smaller model (model.d_model, model.n_layers, model.vocab_size)"));
  }
}

namespace {
// The run itself; train() adds to an out-of-memory error the settings that shrink a step.
TrainResult train_without_memory_advice(RunConfig config, const TrainOptions& options) {
  const auto t_start = Clock::now();
  TrainingRun run = start_run(std::move(config), options.resume);
  if (run.stopped_in_transfer) {  // the transfer saved its state and said so; nothing else was written
    TrainResult stopped;
    stopped.run_dir = run.dir.string();
    stopped.stopped_by_signal = true;
    return stopped;
  }
  const TrainingConfig& tc = run.config.training;
  if (run.data.tokenizer) check_recall_evaluation(run.config, *run.data.tokenizer, run.data.window_bos_id >= 0);
  RunLog log(run);
  // A finetuning run first measures where it starts: the source's weights under this run's
  // attention (the cost of the swap before any training, after the transfer if any); a run of
  // no steps (the transfer alone) has only its final evaluation.
  if (run.finetuning && !run.resumed && tc.steps > 0) log.eval(run);

  bool diverged = false, stopped = false;
  std::int64_t saved_step = run.resumed ? run.step : -1;  // the latest checkpoint's step
  run.model->train(true);
  while (run.step < tc.steps) {
    if (stop_requested(run)) {
      stopped = true;
      break;
    }
    if (options.before_step) {
      NoGradGuard no_grad;
      options.before_step(run.step, *run.model);
    }
    if (features_redrawn_at(*run.model, run.redraw_intervals, run.step)) log.redraw(run);
    // Log steps also measure what drives the random-feature estimators' variance.
    if ((run.step + 1) % tc.log_interval == 0) request_attention_stats(*run.model);
    const StepResult r = train_step(run);
    if (log.step(run, r, take_attention_stats(*run.model))) {
      diverged = true;
      break;
    }
    if (!r.applied) {
      check_skip_limit(run);
      continue;
    }
    const bool last = run.step == tc.steps;  // the final evaluation and checkpoint come in finish()
    if (run.step % tc.eval_interval == 0 && !last) log.eval(run);
    if (tc.checkpoint_interval > 0 && run.step % tc.checkpoint_interval == 0 && !last) {
      save_run(run);
      saved_step = run.step;
    }
  }

  TrainResult result;
  result.steps = run.step;
  result.final_train_loss = log.last_loss();
  result.run_dir = run.dir.string();
  if (diverged) {
    stop_diverged(run, log);
    return result;
  }
  if (stopped) {
    stop_by_signal(run, saved_step);
    result.stopped_by_signal = true;
    return result;
  }
  result.final_eval = finish(run, log);
  spdlog::info("done: {} steps in {}, final train loss {:.4f}, val loss {:.4f}, run folder {}", run.step,
               duration_text(std::chrono::duration<double>(Clock::now() - t_start).count()), result.final_train_loss,
               result.final_eval.loss, result.run_dir);
  log_memory_peak(run.memory);
  return result;
}
}  // namespace

}  // namespace dark::train
