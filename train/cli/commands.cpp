// The data, training and inference subcommands (see commands.h).
#include "train/cli/commands.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>

#include "data/text_data.h"
#include "nn/generate.h"
#include "nn/init.h"
#include "train/ablation.h"
#include "train/cli/args.h"
#include "train/cli/loaded_run.h"
#include "train/formats/checkpoint.h"
#include "train/device_setting.h"
#include "core/file_io.h"
#include "train/formats/hf_export.h"
#include "train/cli/mlp_demo.h"
#include "train/model_builder.h"
#include "train/experiments/probe.h"
#include "train/portable_checkpoint.h"
#include "train/stop_signal.h"
#include "train/trainer.h"

namespace dark::cli {
namespace fs = std::filesystem;

namespace {

const FlagSpec kConfig{"--config", "FILE", "", "run config (JSON); required"};
const FlagSpec kSet{"--set", "KEY=VALUE", "", "override a config key, e.g. --set optimizer.lr=1e-3 (repeatable)", true};

train::RunConfig config_from(const Args& a) { return train::load_config(a.require("--config"), a.all("--set")); }

const FlagSpec kAblate{"--ablate", "PART", "",
                       "also evaluate the exact-window layers without a part: window (the far keys get no weight) or "
                       "features (no window); repeatable",
                       true};

// eval --ablate's ablations, checked before any evaluation: known names, a model that has an exact window.
std::vector<train::Ablation> ablations_of(const Args& a, nn::CausalLM& model) {
  std::vector<train::Ablation> ablations;
  for (const std::string& part : a.all("--ablate")) ablations.push_back(train::parse_ablation(part));
  DARK_CHECK(ablations.empty() || !train::exact_window_layers(model).empty(),
             "--ablate: the checkpoint has no layer with an exact window (attention.exact_window > 0 on a performer, "
             "lfk or darkformer layer): there is no window and no far field to take apart");
  return ablations;
}

// Each ablation's line and by-position table, beside the unablated `m`.
void print_ablations(nn::CausalLM& model, const data::ValidationSet& val, const Args& a,
                     const std::vector<train::Ablation>& ablations, const train::EvalMetrics& m) {
  for (const train::Ablation ablation : ablations) {
    const train::EvalMetrics x = train::evaluate_ablated(model, val, a.integer("--batches", 0), ablation);
    std::printf("%s | val loss %.4f (%+.4f) | perplexity %.2f | next-token accuracy %.4f\n", train::ablation_name(ablation),
                x.loss, x.loss - m.loss, x.perplexity, x.accuracy);
    std::printf("%s", metrics::by_position_table(x.by_position, "  ", m.by_position).c_str());
  }
}

}  // namespace

int prepare_data_command(const CommandArgs& args) {
  const std::vector<FlagSpec> specs = {kConfig, kSet, kHelpFlag};
  if (print_help_if_asked(args, "usage: darkformer prepare-data --config FILE [--set KEY=VALUE ...]\n"
                       "Builds (or verifies) the tokenizer and token shards named by the config's data section.", specs))
    return 0;
  Args a(args, specs);
  train::RunConfig config = config_from(a);
  if (config.data.task == data::DataTask::mqar) {
    std::printf("data.task mqar: synthetic sequences, made as the run reads them; nothing to prepare\n");
    return 0;
  }
  const data::PreparedData d = train::prepare_data_for(config);
  std::printf("data ready in %s: %lld train tokens, %lld val tokens, vocabulary %d (%s)\n", d.dir.c_str(),
              static_cast<long long>(d.train_tokens), static_cast<long long>(d.val_tokens), d.tokenizer->vocab_size(),
              d.reused ? "reused" : "built");
  return 0;
}

int train_command(const CommandArgs& args) {
  const std::vector<FlagSpec> specs = {kConfig, kSet, {"--resume", "", "", "continue the run folder's latest checkpoint"}, kHelpFlag};
  if (print_help_if_asked(args, "usage: darkformer train --config FILE [--set KEY=VALUE ...] [--resume]\n"
                       "Trains a model; see README.md for the run folder and every config key.\n"
                       "SIGTERM or SIGINT: finish the step, checkpoint it, exit with code 75 (continue with --resume);\n"
                       "a second signal ends it at once. Exit codes: 0 done, 1 error, 75 stopped by a signal, 128+N killed by signal N.", specs))
    return 0;
  Args a(args, specs);
  train::TrainOptions options;
  options.resume = a.has("--resume");
  return train::train(config_from(a), options).stopped_by_signal ? train::kStoppedBySignal : 0;
}

int eval_command(const CommandArgs& args) {
  const std::vector<FlagSpec> specs = {
      kCheckpoint,
      {"--batches", "N", "0", "validation batches (0 = all of them)"},
      kData,
      kText,
      kSeqLen,
      {"--batch-size", "N", "the run's training.batch_size", "windows per batch; a .gguf or Hugging Face model: 1"},
      kBos,
      kAblate,
      kDeviceSet,
      kHelpFlag};
  if (print_help_if_asked(args, "usage: darkformer eval --checkpoint PATH [--data DIR | --text FILE] [--batches N] "
                       "[--seq-len N] [--batch-size N] [--ablate window|features ...] [--set training.device=cuda]\n"
                       "Validation loss, perplexity and next-token accuracy of a checkpoint: on the validation split of\n"
                       "the data it trained on (data.val_windows windows), of --data DIR, or on every window of a text file;\n"
                       "then the same by position bucket: the context each prediction had (1-64, 65-256, 257-1K, 1K-4K,\n"
                       "4K+ tokens; docs/long-context.md, \"Loss by distance and ablations\").\n"
                       "PATH may also be a .gguf model or a Hugging Face model folder (softmax, its own tokenizer and\n"
                       "context); by default it is evaluated on debdocs prepared with its tokenizer (prepared if missing).",
                       specs))
    return 0;
  Args a(args, specs);
  LoadedRun run = load_run(a.require("--checkpoint"), a.all("--set"));
  apply_window_flags(run, a);
  const std::vector<train::Ablation> ablations = ablations_of(a, *run.model);
  data::TextData text;
  const data::PreparedData d = run_data(run, a, text);
  const std::int64_t windows = a.has("--text") ? 0 : run.config.data.val_windows;  // 0: every window
  const data::ValidationSet val(d.open_shard(data::Split::val), run.config.training.batch_size, run.config.data.seq_len,
                                windows, run.model->device(), d.window_bos_id, run.config.data.windows);
  std::fprintf(stderr, "eval: %lld window(s) of %d tokens, in batches of %d\n", static_cast<long long>(val.num_windows()),
               run.config.data.seq_len, run.config.training.batch_size);
  const train::EvalMetrics m = train::evaluate(*run.model, val, a.integer("--batches", 0));
  std::printf("step %lld | val loss %.4f | perplexity %.2f | next-token accuracy %.4f | %lld tokens%s%s\n",
              static_cast<long long>(run.step), m.loss, m.perplexity, m.accuracy, static_cast<long long>(m.tokens),
              a.has("--text") ? " of " : "", a.has("--text") ? a.get("--text").c_str() : "");
  std::printf("%s", metrics::by_position_table(m.by_position).c_str());
  print_ablations(*run.model, val, a, ablations, m);
  return 0;
}

int generate_command(const CommandArgs& args) {
  const std::vector<FlagSpec> specs = {kCheckpoint,
                                       {"--prompt", "TEXT", "", "text to continue (this or --prompt-file)"},
                                       {"--prompt-file", "FILE", "",
                                        "continue the text of FILE instead (a long context); only the continuation "
                                        "is printed"},
                                       {"--max-tokens", "N", "64", "tokens to generate"},
                                       {"--temperature", "T", "0.8", "sampling temperature; 0 = greedy"},
                                       {"--top-k", "K", "40", "sample among the K most likely tokens; 0 = all"},
                                       {"--seed", "S", "0", "sampling seed"},
                                       {"--context", "N", "the model's",
                                        "longest window the model sees; the model's is unlimited when every layer's "
                                        "decoding state is bounded, else model.max_seq_len"},
                                       kBos,
                                       kDeviceSet,
                                       kHelpFlag};
  if (print_help_if_asked(args, "usage: darkformer generate --checkpoint PATH (--prompt TEXT | --prompt-file FILE) [options]\n"
                       "Prints the prompt and its continuation on stdout (only the continuation for --prompt-file); the\n"
                       "timings on stderr: load, prefill (the prompt read, to the first new token) and the decode rate.\n"
                       "PATH may also be a .gguf model or a Hugging Face model folder. The whole prompt is read: one\n"
                       "longer than the context is an error. A model that keeps a growing key/value cache (softmax)\n"
                       "continues on the last half of its context when prompt and output fill it (said on stderr);\n"
                       "a random-feature or sliding-window model's state is bounded and never restarts.",
                       specs))
    return 0;
  // stdout is the text alone, for pipes and scripts: log lines (a swap's notice) go to stderr.
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("darkformer", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
  const auto start = std::chrono::steady_clock::now();
  const auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  Args a(args, specs);
  LoadedRun run = load_run(a.require("--checkpoint"), a.all("--set"));
  const double loaded = seconds_since(start);
  nn::GenerateOptions g;
  g.max_tokens = static_cast<int>(a.integer("--max-tokens", 0, std::numeric_limits<int>::max()));
  g.temperature = a.number("--temperature");
  g.top_k = static_cast<int>(a.integer("--top-k", 0, std::numeric_limits<int>::max()));
  g.seed = static_cast<std::uint64_t>(a.integer("--seed", 0));
  g.on_notice = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  DARK_CHECK(g.temperature >= 0, "generate: --temperature must be >= 0, got ", g.temperature);
  const std::int64_t model_context = run.model->decode_context();  // 0: no limit
  if (a.has("--context")) {
    g.context = a.integer("--context", 2);
    if (model_context > 0 && g.context > model_context)
      std::fprintf(stderr, "generate: warning: --context %lld exceeds the context of %s (%lld tokens, model.max_seq_len): "
                   "positions beyond it are extrapolated\n", static_cast<long long>(g.context), run.label.c_str(),
                   static_cast<long long>(model_context));
  }
  const std::int64_t context = nn::generation_context(*run.model, g);
  DARK_CHECK(a.has("--prompt") != a.has("--prompt-file"), "generate: give the text to continue with --prompt TEXT or "
             "--prompt-file FILE (one of them)");
  const bool from_file = a.has("--prompt-file");
  const std::string prompt = from_file ? read_file(a.require("--prompt-file")) : a.require("--prompt");
  std::vector<std::int32_t> ids = data::encode_prompt(*run.tokenizer, prompt, bos_flag(run, a));
  const auto prompt_tokens = static_cast<std::int64_t>(ids.size());
  DARK_CHECK(context == 0 || prompt_tokens <= context, "generate: the prompt has ", prompt_tokens,
             " tokens, more than the context of ", context, " tokens (",
             a.has("--context") ? "--context" : "the model's, model.max_seq_len",
             "); nothing is cut: shorten the prompt or pass --context N with N >= ", prompt_tokens,
             model_context > 0 && prompt_tokens > model_context
                 ? str(" (positions past the model's ", model_context, " are extrapolated)")
                 : std::string());
  if (!from_file) std::cout << prompt << std::flush;
  double first_token = 0, prefill = 0;
  int tokens = 0;
  const auto generating = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point decoding = generating;
  nn::generate(*run.model, ids, g, [&](std::int32_t id) {
    if (tokens++ == 0) {
      first_token = seconds_since(start);
      prefill = seconds_since(generating);
      decoding = std::chrono::steady_clock::now();
    }
    std::cout << run.tokenizer->decode(std::vector<std::int32_t>{id}) << std::flush;
  });
  std::cout << std::endl;
  const double took = seconds_since(generating), decode = seconds_since(decoding);
  // Prefill: the prompt's forward and the first new token; decode: the tokens after it.
  std::fprintf(stderr, "generate: %zu prompt token(s), context %s; %d token(s) in %.2f s (%.1f tokens/s); loaded in "
               "%.2f s, first token %.2f s after start; prefill %.2f s (%.0f prompt tokens/s), then %.1f tokens/s\n",
               ids.size(), context > 0 ? std::to_string(context).c_str() : "unlimited", tokens, took,
               tokens / std::max(took, 1e-9), loaded, first_token, prefill,
               static_cast<double>(ids.size()) / std::max(prefill, 1e-9),
               tokens > 1 ? (tokens - 1) / std::max(decode, 1e-9) : 0.0);
  return 0;
}

namespace {
// "16,32,64" -> {16, 32, 64}; errors name the flag.
std::vector<std::int64_t> integer_list(const std::string& text, const std::string& flag) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    DARK_CHECK(!item.empty() && end && *end == '\0' && v >= 1, flag, ": expected positive integers separated by commas, got '",
               text, "'");
    out.push_back(v);
    start = comma + 1;
  }
  return out;
}
}  // namespace

int probe_command(const CommandArgs& args) {
  const std::vector<FlagSpec> specs = {
      kCheckpoint,
      {"--batches", "N", "2", "validation batches measured"},
      {"--features", "LIST", "16,32,64,128,256", "feature counts m, comma-separated"},
      {"--redraws", "N", "8", "feature draws per (layer, m)"},
      {"--calibration-batches", "N", "2", "training batches for the whiten initialisation"},
      {"--exact-window", "W", "the checkpoint's attention.exact_window",
       "W > 0: also measure every estimator with its W nearest keys exact (rows \"<method> +windowW\")"},
      {"--json", "PATH", "", "write the full report (per layer and head) here; default <checkpoint>/probe.json"},
      kData,
      {"--text", "FILE", "", "measure and calibrate on windows of this text file instead of prepared data"},
      kSeqLen,
      kBos,
      kDeviceSet,
      kHelpFlag};
  if (print_help_if_asked(args, "usage: darkformer probe --checkpoint PATH [--batches N] [--features 16,32,64,128,256]\n"
                       "Monte Carlo error (against the same kernel evaluated exactly) and swap error (against the\n"
                       "layer's softmax attention) of performer, darkformer (identity, whiten, learned M) and lfk\n"
                       "features, per layer and head, on the checkpoint's own attention inputs. See README.md.\n"
                       "PATH may also be a .gguf model or a Hugging Face model folder (its default --json is then\n"
                       "probe-<name>.json in the working directory).", specs))
    return 0;
  Args a(args, specs);
  experiments::ProbeOptions o;
  o.batches = a.integer("--batches", 1);
  o.features = integer_list(a.get("--features"), "--features");
  o.redraws = a.integer("--redraws", 1);
  o.calibration_batches = a.integer("--calibration-batches", 1);
  const std::string where = a.require("--checkpoint");
  LoadedRun run = load_run(where, a.all("--set"));
  apply_window_flags(run, a);
  o.exact_window = a.has("--exact-window") ? static_cast<int>(a.integer("--exact-window", 0, 1 << 30))
                                           : run.config.attention.exact_window;
  data::TextData text;
  const experiments::ProbeReport report = experiments::run_probe(*run.model, run.config, run_data(run, a, text), o);
  std::printf("probe of %s (step %lld): per-token relative errors |out - ref| / |ref|\n"
              "mc = against the same kernel evaluated exactly; swap = against the layer's softmax attention\n\n%s",
              where.c_str(), static_cast<long long>(run.step), report.table().c_str());
  // A source's folder is not ours to write into (cache/models/ is read-only).
  fs::path named = fs::path(where).lexically_normal();
  if (named.filename().empty()) named = named.parent_path();  // "folder/"
  const fs::path default_json = run.source ? fs::path("probe-" + named.stem().string() + ".json") : run.checkpoint_dir / "probe.json";
  const fs::path json_path = a.has("--json") ? fs::path(a.get("--json")) : default_json;
  write_file_atomic(json_path, report.to_json().dump(1) + "\n");
  std::printf("\nwrote %s\n", json_path.c_str());
  return 0;
}

int export_hf_command(const CommandArgs& args) {
  const std::vector<FlagSpec> specs = {kCheckpoint, {"--out", "DIR", "", "output folder; required"}, kHelpFlag};
  if (print_help_if_asked(args, "usage: darkformer export-hf --checkpoint PATH --out DIR\n"
                       "Writes a folder that Hugging Face transformers loads (config.json, model.safetensors,\n"
                       "generation_config.json, the tokenizer for AutoTokenizer): a softmax model as\n"
                       "LlamaForCausalLM or Gemma3ForCausalLM; a model with random-feature layers with its\n"
                       "own modeling_darkformer.py, loaded with AutoModelForCausalLM.from_pretrained(DIR,\n"
                       "trust_remote_code=True). See docs/finetuning.md, \"Export to Hugging Face\".", specs))
    return 0;
  Args a(args, specs);
  LoadedRun run = load_run(a.require("--checkpoint"));
  const fs::path out = a.require("--out");
  const std::vector<fs::path> files =
      formats::export_hf(*run.model, run.tokenizer.get(), out, run.bos);
  std::printf("wrote %s (step %lld):", out.c_str(), static_cast<long long>(run.step));
  for (const fs::path& f : files) std::printf(" %s", f.filename().c_str());
  std::printf("\n");
  return 0;
}

int demo_mlp_command(const CommandArgs& args) {
  const std::vector<FlagSpec> specs = {{"--steps", "N", "2000", "optimizer steps"},
                                       {"--lr", "X", "0.3", "SGD learning rate"},
                                       {"--batch-size", "N", "64", "examples per step"},
                                       {"--seed", "N", "0", "Philox seed for weights and data"},
                                       kHelpFlag};
  if (print_help_if_asked(args, "usage: darkformer demo-mlp [--steps N] [--lr X] [--batch-size N] [--seed N]\n"
                                "Trains a small MLP on a synthetic regression task with the autograd tape.", specs))
    return 0;
  Args a(args, specs);
  MlpDemoConfig config;
  config.steps = static_cast<int>(a.integer("--steps", 1, std::numeric_limits<int>::max()));
  config.learning_rate = a.number("--lr");
  DARK_CHECK(config.learning_rate > 0, "--lr: expected a number > 0, got ", a.get("--lr"));
  config.batch_size = static_cast<int>(a.integer("--batch-size", 1, std::numeric_limits<int>::max()));
  config.seed = static_cast<std::uint64_t>(a.integer("--seed", 0));
  std::printf("demo-mlp: %d steps, batch %d, lr %g, seed %llu\n", config.steps, config.batch_size,
              config.learning_rate, static_cast<unsigned long long>(config.seed));
  const int every = std::max(1, config.steps / 15);
  const MlpDemoResult result = run_mlp_demo(config, [&](int step, double loss) {
    if (step % every == 0 || step + 1 == config.steps) std::printf("step %5d/%d | loss %.6f\n", step + 1, config.steps, loss);
  });
  std::printf("held-out loss: %.6f before training, %.6f after (%.1fx lower)\n", result.initial_eval_loss,
              result.final_eval_loss, result.initial_eval_loss / result.final_eval_loss);
  return 0;
}

}  // namespace dark::cli
