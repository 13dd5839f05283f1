// The run configuration: one JSON document describes a training run. RunConfig is its typed
// form: each section is the config struct of the layer that uses it (nn::ModelConfig,
// attention::AttentionConfig, ...; the sections of the training run itself are below), so
// the values a layer reads are the values the document set, with no translation between.
// Every field has a default (the member initialisers) and is documented.
//
// The schema lives once, in train/config.cpp: a table of fields, each naming its JSON path
// (identical to the C++ member path, e.g. "model.d_model" or "attention.darkformer.rank";
// every dot is one level of JSON object), type, allowed values and a one-line description.
// That table drives parsing, validation, the resolved-config output, the start-up table and
// the Markdown reference (config_markdown_table()).
//
// Rules: unknown keys are errors (with the closest known key suggested); values are
// type-checked and range-checked; cross-field constraints are checked after the "auto"
// values (0 or "") are resolved. Every failure is a dark::Error starting "config: " and
// naming the JSON path, e.g.
//   config: optimizer.name: "adam" is not one of adamw, sgd
//   config: training.steps: expected a positive integer, got -5
//   config: model.n_layer: unknown key (did you mean model.n_layers?)
//   config: attention.layers.0-1.num_feature: unknown key (did you mean num_features?)
//
// Per-layer attention: "attention": {"layers": {"0-1": {"kind": "softmax"}, "5": {...}}} maps
// a layer ("5") or an inclusive range ("0-1", first < last) to attention keys that replace
// the base ones in those layers. An override may set any attention key but "layers" (nested
// "darkformer" / "lfk" objects included), checked like the base keys. Ranges must lie within
// model.n_layers and be disjoint. attention_for_layer() gives a layer's effective settings.
// Config files are JSON; // and /* */ comments are allowed.
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <array>
#include <set>
#include <string>
#include <vector>

#include "attention/config.h"
#include "core/enum_names.h"
#include "data/prepare.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "nn/schedule.h"
#include "train/dist/communicator.h"
#include "train/metrics/stability.h"

namespace dark::train {

// ---- the sections owned by this layer (the others are nn::ModelConfig,
// attention::AttentionConfig, data::DataConfig, nn::OptimizerConfig, nn::ScheduleConfig and
// StabilityConfig in train/metrics/stability.h) ----
// training.precision: what activations and products compute in. Master weights, gradient
// buffers, optimizer state, statistics and the loss are f32 either way.
enum class Precision { f32, bf16 };
// training.memory_check: what the memory pre-flight (train/memory_estimate.h) does when the
// estimated peak exceeds what the machine allows.
enum class MemoryCheck { error, warn, off };

struct TrainingConfig {
  std::int64_t steps = 1000;               // optimizer steps
  int batch_size = 16;                     // sequences per micro-batch
  int grad_accum = 1;                      // micro-batches per optimizer step
  std::int64_t eval_interval = 100;        // steps between validation runs
  int eval_batches = 8;                    // batches per validation run
  std::int64_t checkpoint_interval = 500;  // steps between checkpoints; 0 = only at the end
  int keep_checkpoints = 3;                // most recent checkpoints kept; 0 = keep all
  int max_consecutive_skips = 5;           // non-finite steps skipped in a row before aborting
  std::int64_t log_interval = 10;          // steps between log lines
  int generate_tokens = 64;                // tokens sampled at the end of training; 0 = none
  std::string generate_prompt = "The";     // prompt for that sample
  std::string device = "cpu";              // cpu, cuda, cuda:N or auto (see train/device_setting.h)
  Precision precision = Precision::f32;    // bf16: mixed precision (GPUs)
  bool activation_checkpointing = false;   // recompute each decoder block in backward (less memory)
  bool cuda_graph = false;                 // capture forward + backward once as a CUDA graph, launch it each step
  MemoryCheck memory_check = MemoryCheck::error;  // above the machine's memory: refuse, warn or do not check
  bool flush_denormals = true;             // CPU: subnormal floats computed as 0 (core/cpu/float_mode.h)
};

// Recall tasks run at the end of a run, after its final evaluation (train/recall_evaluation.h):
// passkey retrieval (train/passkey_eval.h) and the copy task (train/copy_eval.h); trials 0 = off.
struct PasskeyEvaluationConfig {
  std::vector<std::int64_t> lengths = {512, 1024, 2048, 4096};  // prompt lengths in tokens
  int depths = 5;          // needle depths: a grid of this many points in [0, 1]
  int trials = 0;          // prompts per (length, depth); 0 = no passkey evaluation
  std::uint64_t seed = 0;  // the pass keys
};
struct CopyEvaluationConfig {
  std::vector<std::int64_t> words = {32, 128, 512, 2048, 4096};  // list lengths in words
  int trials = 0;          // lists per length; 0 = no copy evaluation
  std::uint64_t seed = 0;  // the lists
};

// What a run's evaluations measure beyond the loss, accuracy and their split by position.
struct EvaluationConfig {
  // The final evaluation also runs window only and features only (train/ablation.h) on the
  // exact-window layers: what each part carries.
  bool ablation = false;
  PasskeyEvaluationConfig passkey;
  CopyEvaluationConfig copy;
};

// Finetuning: start from trained weights (ours or a GGUF model), possibly with another
// attention kind, and train only some parameters. See train/swap/finetune.h.
// Attention transfer before finetuning (train/swap/transfer.h): each swapped layer is fitted to
// reproduce its exact attention output on the frozen source model's activations.
struct TransferConfig {
  std::int64_t steps = 0;  // optimizer steps of training batches; 0 = no transfer
  double lr = 1e-3;        // AdamW learning rate (constant, no weight decay)
  // What trains, in the swapped layers only: presets feature_map (the kind's own parameters:
  // DARKFormer's M, LFK's W), qk (and q_proj, k_proj), qkv (and v_proj), or parameter globs.
  std::vector<std::string> trainable = {"feature_map"};
  double output_weight = 1.0;     // weight of |out - exact|^2 / |exact|^2 per swapped layer
  double attention_weight = 0.1;  // weight of KL(exact attention weights || the kernel's), sampled rows
  int attention_rows = 32;        // query rows per sequence the attention-weight term is computed on
  std::int64_t redraw_interval = 10;  // steps between feature redraws (epochs 1, 2, ...; 0 held out); 0 = one draw
  double window_dropout = 0.0;    // probability a step runs a layer without its exact window, falling to 0; 0 = off
  int eval_batches = 2;  // validation batches the per-layer error is measured on, before and after
  // Steps between saves of the transfer's state (train/swap/transfer_state.h), which --resume
  // continues; 0: only when a stop signal arrives.
  std::int64_t checkpoint_interval = 50;
};

struct FinetuneConfig {
  std::string init_from;                         // checkpoint, run folder or .gguf file; "" = random initialisation
  std::vector<std::string> trainable = {"all"};  // parameter-name globs or presets (all, limited_attention)
  TransferConfig transfer;
};

// Data parallelism over the ranks of a run started by mpirun (train/data_parallel.h,
// README "Scaling out"). A plain process is one rank: only timeout_s and zero_stage's
// check apply to it.
struct DistributedConfig {
  dist::BackendKind backend = dist::BackendKind::automatic;  // auto: nccl for GPUs, mpi for the CPU under mpirun
  double bucket_mb = 25;   // gradient all-reduce bucket size (MiB); a bucket's all-reduce starts when backward has filled it
  int zero_stage = 0;      // 1 = ZeRO stage 1: the optimizer state is sharded over the ranks
  double timeout_s = 600;  // a collective that has not finished by then ends the job with an error
};

struct OutputConfig {
  std::string dir;  // run folder (checkpoints, metrics, config.json); "" = runs/<config file stem>
  bool tensorboard = true;  // a TensorBoard event file in the run folder (train/run_events.h)
};

// ---- the configuration ----
struct RunConfig {
  nn::ModelConfig model;
  attention::AttentionConfig attention;
  data::DataConfig data;
  nn::OptimizerConfig optimizer;
  nn::ScheduleConfig schedule;
  TrainingConfig training;
  EvaluationConfig evaluation;
  DistributedConfig distributed;
  FinetuneConfig finetune;
  OutputConfig output;
  metrics::StabilityConfig stability;
  std::uint64_t seed = 0;  // root of every random stream (init, data order, dropout, features)
  // The schema paths the config document set explicitly (not written out): init_from takes
  // the model's shape from its source for the keys the document left at their defaults.
  std::set<std::string> given;
};

// The attention settings of one layer: the base config with the overrides whose range holds
// `layer` applied (`layers` cleared), and the run's seed. A sliding-window layer (gemma3's
// local layers) whose kind is not softmax gets kind softmax (exact windowed softmax) unless
// attention.windowed_layers is "same".
attention::AttentionConfig attention_for_layer(const RunConfig& config, int layer);
// Whether attention_for_layer() turned `layer` back to windowed softmax.
bool keeps_windowed_softmax(const RunConfig& config, int layer);
// What the stability analysis of a run needs: its stability section, warm-up and redraw interval.
metrics::StabilityOptions stability_options(const RunConfig& config);

// ---- the documented keys (from the schema, in documentation order) ----
struct ConfigKey {
  std::string path;           // "model.d_model"
  std::string type;           // "integer", "number", "boolean", "string", "list of strings", "object", ...
  std::string default_value;  // the default as JSON, e.g. 256 or "swiglu"
  std::string allowed;        // e.g. ">= 1", "[0, 1)", "softmax, performer, lfk, darkformer"
  std::string description;    // one line
};
const std::vector<ConfigKey>& config_keys();

// ---- reading ----
// Reads a JSON file (comments allowed). Errors: "config: cannot read PATH: REASON",
// "config: PATH: invalid JSON at line L, column C: ...".
nlohmann::json read_config_json(const std::filesystem::path& path);
// The same, keeping the file's key order (a sweep's axes are a grid in the order written).
nlohmann::ordered_json read_ordered_config_json(const std::filesystem::path& path);
// Sets one key from "a.b=value" (at any depth: "attention.darkformer.rank=8"): the value is
// parsed as JSON when it parses (numbers, true/false, arrays, "quoted strings"), else taken as
// a bare string; a string-typed key always takes the text as written. The key must exist in the schema. Not validated here.
void apply_override(nlohmann::json& doc, const std::string& assignment);
// Parses, resolves auto values and validates a config document. `config_stem` names the
// default run folder (runs/<config_stem>).
RunConfig parse_config(const nlohmann::json& doc, const std::string& config_stem = "default");
// parse_config of a config as a checkpoint saved it (state.json "config"), where a key added
// since takes the value that reproduces the saved run: data.windows "packed" when absent.
RunConfig parse_saved_config(const nlohmann::json& saved);
// read_config_json + apply_override for each override + parse_config with the file's stem.
RunConfig load_config(const std::filesystem::path& path, const std::vector<std::string>& overrides = {});

// Fills auto values: model.n_kv_heads, model.d_ff, model.max_seq_len, data.dir, output.dir.
// model.vocab_size stays 0 until the caller sets it from the tokenizer.
void resolve_config(RunConfig& config, const std::string& config_stem = "default");
// Per-field ranges and cross-field constraints: the model's shape rules
// (nn::ModelConfig::validate), max_seq_len >= data.seq_len, warmup_steps <= steps (steps > 0), momentum
// only with sgd, the attention rules (attention::validate) on every layer's settings,
// per-layer ranges within model.n_layers and disjoint. Auto values count as resolved.
void validate_config(const RunConfig& config);

// ---- writing ----
// Every key with its current value (the fully resolved config when `config` is resolved).
nlohmann::json to_json(const RunConfig& config);
// Writes `dir`/config.json (pretty JSON) atomically, creating `dir` if needed.
void write_resolved(const RunConfig& config, const std::filesystem::path& dir);
// Plain-text table of every key and its value, noting values that differ from the default;
// printed by `darkformer train` at start-up.
std::string config_table(const RunConfig& config);
// Markdown table of the documented keys: key | type | default | allowed | description.
std::string config_markdown_table();

}  // namespace dark::train

namespace dark {
template <>
struct EnumNames<train::MemoryCheck> {
  static constexpr std::array<std::pair<train::MemoryCheck, std::string_view>, 3> table{
      {{train::MemoryCheck::error, "error"}, {train::MemoryCheck::warn, "warn"}, {train::MemoryCheck::off, "off"}}};
};
template <>
struct EnumNames<train::Precision> {
  static constexpr std::array<std::pair<train::Precision, std::string_view>, 2> table{
      {{train::Precision::f32, "f32"}, {train::Precision::bf16, "bf16"}}};
};
}  // namespace dark
