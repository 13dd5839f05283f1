// The run configuration: one JSON document describes a training run. RunConfig is its typed
// form; every field has a default (the member initialisers below) and is documented.
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
#include <array>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dark::train {

// ---- enumerations: a new kind is one enumerator plus one row in its EnumNames table ----
enum class MlpKind { swiglu, geglu };
enum class AttentionKind { softmax, performer, lfk, darkformer };
enum class TokenizerKind { sentencepiece, byte, gguf };
enum class OptimizerKind { adamw, sgd };
enum class ScheduleKind { cosine, linear, constant };
enum class FeatureDrawKind { iid, orthogonal };
enum class AttentionMode { linear, exact };
enum class ProposalKind { isotropic, variance_optimal };
enum class DarkformerScope { head, layer };
enum class DarkformerInit { identity, whiten };
enum class LfkInit { orthogonal, iid };

// The spelling of each enumerator in config files, in documentation order.
template <class E>
struct EnumNames;
template <>
struct EnumNames<MlpKind> {
  static constexpr std::array<std::pair<MlpKind, std::string_view>, 2> table{
      {{MlpKind::swiglu, "swiglu"}, {MlpKind::geglu, "geglu"}}};
};
template <>
struct EnumNames<AttentionKind> {
  static constexpr std::array<std::pair<AttentionKind, std::string_view>, 4> table{
      {{AttentionKind::softmax, "softmax"},
       {AttentionKind::performer, "performer"},
       {AttentionKind::lfk, "lfk"},
       {AttentionKind::darkformer, "darkformer"}}};
};
template <>
struct EnumNames<TokenizerKind> {
  static constexpr std::array<std::pair<TokenizerKind, std::string_view>, 3> table{
      {{TokenizerKind::sentencepiece, "sentencepiece"}, {TokenizerKind::byte, "byte"}, {TokenizerKind::gguf, "gguf"}}};
};
template <>
struct EnumNames<OptimizerKind> {
  static constexpr std::array<std::pair<OptimizerKind, std::string_view>, 2> table{
      {{OptimizerKind::adamw, "adamw"}, {OptimizerKind::sgd, "sgd"}}};
};
template <>
struct EnumNames<ScheduleKind> {
  static constexpr std::array<std::pair<ScheduleKind, std::string_view>, 3> table{
      {{ScheduleKind::cosine, "cosine"},
       {ScheduleKind::linear, "linear"},
       {ScheduleKind::constant, "constant"}}};
};
template <>
struct EnumNames<FeatureDrawKind> {
  static constexpr std::array<std::pair<FeatureDrawKind, std::string_view>, 2> table{
      {{FeatureDrawKind::iid, "iid"}, {FeatureDrawKind::orthogonal, "orthogonal"}}};
};
template <>
struct EnumNames<AttentionMode> {
  static constexpr std::array<std::pair<AttentionMode, std::string_view>, 2> table{
      {{AttentionMode::linear, "linear"}, {AttentionMode::exact, "exact"}}};
};
template <>
struct EnumNames<ProposalKind> {
  static constexpr std::array<std::pair<ProposalKind, std::string_view>, 2> table{
      {{ProposalKind::isotropic, "isotropic"}, {ProposalKind::variance_optimal, "variance_optimal"}}};
};
template <>
struct EnumNames<DarkformerScope> {
  static constexpr std::array<std::pair<DarkformerScope, std::string_view>, 2> table{
      {{DarkformerScope::head, "head"}, {DarkformerScope::layer, "layer"}}};
};
template <>
struct EnumNames<DarkformerInit> {
  static constexpr std::array<std::pair<DarkformerInit, std::string_view>, 2> table{
      {{DarkformerInit::identity, "identity"}, {DarkformerInit::whiten, "whiten"}}};
};
template <>
struct EnumNames<LfkInit> {
  static constexpr std::array<std::pair<LfkInit, std::string_view>, 2> table{
      {{LfkInit::orthogonal, "orthogonal"}, {LfkInit::iid, "iid"}}};
};

// "swiglu" for MlpKind::swiglu, and so on.
template <class E>
requires requires {
  EnumNames<E>::table;
}
constexpr std::string_view enum_name(E value) {
  for (const auto& [v, name] : EnumNames<E>::table) {
    if (v == value) return name;
  }
  return "?";
}

// ---- the configuration ----
struct ModelConfig {
  int vocab_size = 0;             // token vocabulary size; 0 = take it from the tokenizer
  int d_model = 256;              // width of the residual stream
  int n_layers = 4;               // decoder blocks
  int n_heads = 4;                // query heads per attention layer
  int n_kv_heads = 0;             // key/value heads (grouped-query attention); 0 = n_heads
  int d_ff = 0;                   // gated-MLP hidden width; 0 = multiple of 64 nearest 8/3 d_model
  MlpKind mlp = MlpKind::swiglu;  // gated-MLP activation
  double rope_theta = 10000.0;    // RoPE base frequency
  double norm_eps = 1e-5;         // RMSNorm epsilon
  bool tie_embeddings = true;     // lm_head shares the token-embedding matrix
  double dropout = 0.0;           // dropout probability, in [0, 1)
  double init_std = 0.02;         // standard deviation of the normal weight initialisation
  int max_seq_len = 0;            // longest sequence (RoPE table length); 0 = data.seq_len
};

struct DarkformerConfig {
  DarkformerScope scope = DarkformerScope::head;  // one M per (layer, head), or one per layer shared by its heads
  int rank = 0;                                   // rows of M (r x d); 0 = full rank d; must be <= head dim
  DarkformerInit init = DarkformerInit::identity; // identity = exactly Performer with the same features; whiten = from calibration covariance
};
struct LfkConfig {
  LfkInit init = LfkInit::orthogonal;  // how W (m x d) is initialised: a Performer draw of that kind
};
struct AttentionLayerOverride {
  int first = 0, last = 0;   // inclusive layer range, from a key "3" or "0-1"
  nlohmann::json settings;   // the attention keys it sets (validated), e.g. {"kind": "softmax"}
};
// Cross-field rules (validate_config), on the base settings and on each layer's effective
// settings:
//   darkformer.rank <= head dimension (model.d_model / model.n_heads);
//   mode "exact" not with kind lfk (LFK learns its feature map: there is no fixed kernel);
//   proposal "variance_optimal" only with kind performer or darkformer (LFK learns its
//   features, softmax has none) and only with mode "linear" (exact attention draws none).
struct AttentionConfig {
  AttentionKind kind = AttentionKind::softmax;
  int num_features = 64;                       // m, random features per head; >= 1
  FeatureDrawKind draw = FeatureDrawKind::orthogonal;
  std::int64_t redraw_interval = 1000;         // optimizer steps between feature redraws in training; 0 = never
  double eps = 1e-6;                           // denominator guard (> 0), in offset-scaled units
  AttentionMode mode = AttentionMode::linear;  // linear = random features; exact = the same kernel evaluated exactly
  ProposalKind proposal = ProposalKind::isotropic;
  int chunk_size = 64;                         // causal linear-attention chunk length, >= 1
  int calibration_batches = 4;                 // training batches measured for darkformer.init=whiten and proposal=variance_optimal, >= 1
  DarkformerConfig darkformer;
  LfkConfig lfk;
  std::vector<AttentionLayerOverride> layers;  // per-layer overrides
};

struct DataConfig {
  std::string corpus = "debdocs";    // named corpus to build or read
  std::vector<std::string> sources;  // files, folders or globs of text; replace `corpus` when given
  std::string dir;                   // token shards; "" = cache/data/<corpus>-<tokenizer>-<vocab>
  TokenizerKind tokenizer = TokenizerKind::sentencepiece;  // tokenizer family
  std::string tokenizer_model;                             // existing tokenizer model file (.model, or .gguf for gguf); "" = train one
  int vocab_size = 8192;                                   // vocabulary size of a tokenizer trained here
  double val_fraction = 0.02;                              // share of the corpus held out for validation
  int seq_len = 256;                                       // tokens per training window
  int val_windows = 64;                                    // validation windows per evaluation
};

struct OptimizerConfig {
  OptimizerKind name = OptimizerKind::adamw;  // optimizer
  double lr = 3e-4;                           // peak learning rate
  std::array<double, 2> betas = {0.9, 0.95};  // AdamW moment decay rates
  double eps = 1e-8;                          // AdamW denominator epsilon
  double weight_decay = 0.1;                  // decoupled weight decay
  double momentum = 0.0;                      // SGD momentum (sgd only)
  // Parameter-name glob patterns that get no weight decay.
  // The attention feature maps (DARKFormer's M, LFK's W) are excluded too: decaying M toward 0
  // flattens the kernel toward uniform attention instead of regularising toward Performer.
  std::vector<std::string> no_decay = {"*norm*", "*embed_tokens*", "*feature_map*"};
  double grad_clip = 1.0;  // max global gradient L2 norm; 0 = off
};

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::cosine;  // decay after warm-up
  std::int64_t warmup_steps = 100;           // linear warm-up steps from 0 to optimizer.lr
  double min_lr_ratio = 0.1;                 // final learning rate as a fraction of optimizer.lr
};

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
};

// Finetuning: start from trained weights (ours or a GGUF model), possibly with another
// attention kind, and train only some parameters. See train/finetune.h.
struct FinetuneConfig {
  std::string init_from;                         // checkpoint, run folder or .gguf file; "" = random initialisation
  std::vector<std::string> trainable = {"all"};  // parameter-name globs or presets (all, limited_attention)
};

struct OutputConfig {
  std::string dir;  // run folder (checkpoints, metrics, config.json); "" = runs/<config file stem>
};

// Loss-spike and divergence detection (train/stability.h), written to stability.json.
struct StabilityConfig {
  int window = 50;                  // previous steps whose median loss / gradient norm a step is compared with
  double loss_factor = 1.2;         // loss spike: loss > loss_factor x that median
  double grad_factor = 2.0;         // gradient-norm spike: grad_norm > grad_factor x that median
  bool stop_on_divergence = false;  // end a diverged run early (no final checkpoint), e.g. in sweeps
};

struct RunConfig {
  ModelConfig model;
  AttentionConfig attention;
  DataConfig data;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  TrainingConfig training;
  FinetuneConfig finetune;
  OutputConfig output;
  StabilityConfig stability;
  std::uint64_t seed = 0;  // root of every random stream (init, data order, dropout, features)
  // The schema paths the config document set explicitly (not written out): init_from takes
  // the model's shape from its source for the keys the document left at their defaults.
  std::set<std::string> given;
};

// The attention settings of one layer: the base config with the overrides whose range holds `layer` applied (`layers` cleared).
AttentionConfig attention_for_layer(const RunConfig& config, int layer);

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
// Sets one key from "a.b=value" (at any depth: "attention.darkformer.rank=8"): the value is
// parsed as JSON when it parses (numbers, true/false, arrays, "quoted strings"), else taken as
// a bare string; a string-typed key always takes the text as written. The key must exist in the schema. Not validated here.
void apply_override(nlohmann::json& doc, const std::string& assignment);
// Parses, resolves auto values and validates a config document. `config_stem` names the
// default run folder (runs/<config_stem>).
RunConfig parse_config(const nlohmann::json& doc, const std::string& config_stem = "default");
// read_config_json + apply_override for each override + parse_config with the file's stem.
RunConfig load_config(const std::filesystem::path& path, const std::vector<std::string>& overrides = {});

// Fills auto values: model.n_kv_heads, model.d_ff, model.max_seq_len, data.dir, output.dir.
// model.vocab_size stays 0 until the caller sets it from the tokenizer.
void resolve_config(RunConfig& config, const std::string& config_stem = "default");
// Per-field ranges and cross-field constraints (n_heads divides d_model, even head
// dimension for RoPE, n_kv_heads divides n_heads, max_seq_len >= data.seq_len,
// warmup_steps <= steps, momentum only with sgd, the attention rules above AttentionConfig,
// per-layer ranges within model.n_layers and disjoint). Auto values count as resolved.
void validate_config(const RunConfig& config);
// The d_ff that 0 resolves to: the multiple of 64 nearest 8/3 d_model (ties up), at least 64.
int auto_d_ff(int d_model);

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
