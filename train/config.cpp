// The run-configuration schema (one table, make_schema()) and everything it drives: parsing
// with type/range checks, unknown-key suggestions, overrides, auto-value resolution,
// cross-field validation, JSON output and the documentation tables. See config.h.
#include "train/config.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <type_traits>

#include "core/device.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/hash.h"
#include "core/json_depth.h"
#include "data/common_words.h"
#include "train/formats/checkpoint.h"
#include "train/formats/hf_folder.h"

namespace dark::train {

namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& path, const std::string& message) {
  throw Error(str("config: ", path, ": ", message));
}

// A value as JSON text for an error message. Bytes that are not UTF-8 (an override's bare
// text) print as U+FFFD instead of making dump() throw json::type_error over the real error.
std::string shown(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

// "0.02", "1e-05", "10000": numbers as people write them.
std::string number_text(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", v);
  return buffer;
}

// ---------------------------------------------------------------- value checks
// A field's value arrives as JSON; each check throws "config: PATH: expected ..., got ..."
// for a wrong type ("expected a number") or a value out of range ("expected a number > 0").

std::int64_t integer_value(const json& v, const std::string& path, std::int64_t min, std::int64_t type_max) {
  const std::string range = min == 1   ? "a positive integer"
                            : min == 0 ? "a non-negative integer"
                                       : "an integer >= " + std::to_string(min);
  std::int64_t x = 0;
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(type_max))
      fail(path, str("expected ", range, " <= ", type_max, ", got ", shown(v)));
    x = static_cast<std::int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<std::int64_t>();
  } else if (v.is_number_float()) {
    // 1e3 is an integer written as a float; 2.5 is not.
    const double d = v.get<double>();
    if (d != std::floor(d) || std::fabs(d) > 9.0e18) fail(path, str("expected an integer, got ", shown(v)));
    x = static_cast<std::int64_t>(d);
  } else {
    fail(path, str("expected an integer, got ", shown(v)));
  }
  if (x < min) fail(path, str("expected ", range, ", got ", shown(v)));
  if (x > type_max) fail(path, str("expected ", range, " <= ", type_max, ", got ", shown(v)));
  return x;
}

// An interval for numbers; a missing bound is unbounded.
struct NumberRange {
  std::optional<double> lo;
  bool lo_open = false;
  std::optional<double> hi;
  bool hi_open = false;

  std::string text() const {  // "> 0", ">= 0", "[0, 1)"
    if (lo && hi)
      return str(lo_open ? "(" : "[", number_text(*lo), ", ", number_text(*hi), hi_open ? ")" : "]");
    if (lo) return str(lo_open ? "> " : ">= ", number_text(*lo));
    if (hi) return str(hi_open ? "< " : "<= ", number_text(*hi));
    return "";
  }
  std::string description() const {
    if (lo && hi) return "a number in " + text();
    if (lo || hi) return "a number " + text();
    return "a number";
  }
  bool contains(double x) const {
    if (lo && (lo_open ? x <= *lo : x < *lo)) return false;
    if (hi && (hi_open ? x >= *hi : x > *hi)) return false;
    return true;
  }
};
NumberRange positive() {
  return {0.0, true, std::nullopt, false};
}
NumberRange non_negative() {
  return {0.0, false, std::nullopt, false};
}
NumberRange unit_interval(bool hi_open) {
  return {0.0, false, 1.0, hi_open};
}
NumberRange open_unit_interval() {
  return {0.0, true, 1.0, true};
}

double number_value(const json& v, const std::string& path, const NumberRange& range) {
  if (!v.is_number()) fail(path, str("expected a number, got ", shown(v)));
  const double x = v.get<double>();
  if (!range.contains(x)) fail(path, str("expected ", range.description(), ", got ", shown(v)));
  return x;
}

bool boolean_value(const json& v, const std::string& path) {
  if (!v.is_boolean()) fail(path, str("expected true or false, got ", shown(v)));
  return v.get<bool>();
}

std::string string_value(const json& v, const std::string& path, bool non_empty) {
  if (!v.is_string()) fail(path, str("expected a string, got ", shown(v)));
  std::string s = v.get<std::string>();
  if (non_empty && s.empty()) fail(path, "expected a non-empty string, got \"\"");
  return s;
}

std::vector<std::string> string_list_value(const json& v, const std::string& path) {
  if (!v.is_array()) fail(path, str("expected a list of strings, got ", shown(v)));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    out.push_back(string_value(v[i], str(path, "[", i, "]"), false));
  }
  return out;
}

template <class E>
E enum_value(const json& v, const std::string& path) {
  if (!v.is_string()) fail(path, str("expected one of ", enum_choices<E>(), ", got ", shown(v)));
  if (const std::optional<E> value = find_enum<E>(v.get<std::string>())) return *value;
  fail(path, str(shown(v), " is not one of ", enum_choices<E>()));
}

// training.device: "cpu", "cuda", "cuda:N" or "auto" (which device is usable is decided at
// run time, train/device_setting.h; here only the spelling is checked).
std::string device_value(const json& v, const std::string& path) {
  const std::string text = string_value(v, path, true);
  if (text == "auto") return text;
  try {
    Device::parse(text);
  } catch (const Error&) {
    fail(path, str(shown(v), " is not one of cpu, cuda, cuda:N (N >= 0), auto"));
  }
  return text;
}

// ---------------------------------------------------------------- the schema
struct Field {
  std::string path;         // JSON path == C++ member path below RunConfig
  std::string type;         // for the documentation tables
  std::string allowed;      // for the documentation tables
  std::string description;  // one line
  bool takes_text = false;  // string-typed: an override's text is the value as written
  std::function<json(const RunConfig&)> get;
  // Type- and range-checks a JSON value (errors name `where`), then stores it.
  std::function<void(RunConfig&, const json&, const std::string& where)> set;
};

// Expands to a field's JSON path and an accessor for the member with the same path, so the
// two cannot drift apart: DARK_CONFIG_MEMBER(model.d_model).
#define DARK_CONFIG_MEMBER(member) \
#member, [](auto& c) -> auto& {  \
    return c.member;               \
  }

template <class Access>
using MemberType = std::remove_cvref_t<decltype(std::declval<Access>()(std::declval<RunConfig&>()))>;

template <class Access>
Field integer(std::string path, Access access, std::int64_t min, std::string description) {
  using T = MemberType<Access>;
  static_assert(std::is_integral_v<T>);
  // Values travel as int64 (the seed, a uint64, accepts 0 .. 2^63 - 1).
  std::int64_t type_max = std::numeric_limits<std::int64_t>::max();
  if constexpr (sizeof(T) < sizeof(std::int64_t)) type_max = std::numeric_limits<T>::max();
  return {std::move(path),
          "integer",
          min == 1 ? ">= 1" : ">= " + std::to_string(min),
          std::move(description),
          false,
          [access](const RunConfig& c) { return json(access(c)); },
          [access, min, type_max](RunConfig& c, const json& v, const std::string& where) {
            access(c) = static_cast<T>(integer_value(v, where, min, type_max));
          }};
}

template <class Access>
Field number(std::string path, Access access, NumberRange range, std::string description) {
  return {std::move(path),
          "number",
          range.text(),
          std::move(description),
          false,
          [access](const RunConfig& c) { return json(access(c)); },
          [access, range](RunConfig& c, const json& v, const std::string& where) {
            access(c) = number_value(v, where, range);
          }};
}

template <class Access>
Field boolean(std::string path, Access access, std::string description) {
  return {std::move(path),
          "boolean",
          "true, false",
          std::move(description),
          false,
          [access](const RunConfig& c) { return json(access(c)); },
          [access](RunConfig& c, const json& v, const std::string& where) {
            access(c) = boolean_value(v, where);
          }};
}

template <class Access>
Field text(std::string path, Access access, bool non_empty, std::string description) {
  return {std::move(path),
          "string",
          non_empty ? "non-empty" : "",
          std::move(description),
          true,
          [access](const RunConfig& c) { return json(access(c)); },
          [access, non_empty](RunConfig& c, const json& v, const std::string& where) {
            access(c) = string_value(v, where, non_empty);
          }};
}

template <class Access>
Field text_list(std::string path, Access access, std::string description) {
  return {std::move(path),
          "list of strings",
          "",
          std::move(description),
          false,
          [access](const RunConfig& c) { return json(access(c)); },
          [access](RunConfig& c, const json& v, const std::string& where) {
            access(c) = string_list_value(v, where);
          }};
}

// A list of integers, each in [min, max], none twice (a table's rows: evaluation.passkey.lengths).
std::vector<std::int64_t> integer_list_value(const json& v, const std::string& path, std::int64_t min, std::int64_t max) {
  if (!v.is_array() || v.empty()) fail(path, str("expected a non-empty list of integers, got ", shown(v)));
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string where = str(path, "[", i, "]");
    out.push_back(integer_value(v[i], where, min, max));
    if (std::find(out.begin(), out.end() - 1, out.back()) != out.end() - 1) fail(where, str(out.back(), " is listed twice"));
  }
  return out;
}

template <class Access>
Field integer_list(std::string path, Access access, std::int64_t min, std::int64_t max, std::string description) {
  return {std::move(path),
          "list of integers",
          str("each in [", min, ", ", max, "], distinct"),
          std::move(description),
          false,
          [access](const RunConfig& c) { return json(access(c)); },
          [access, min, max](RunConfig& c, const json& v, const std::string& where) {
            access(c) = integer_list_value(v, where, min, max);
          }};
}

template <class Access>
Field number_pair(std::string path, Access access, NumberRange range, std::string description) {
  return {std::move(path),
          "[number, number]",
          "each " + range.text(),
          std::move(description),
          false,
          [access](const RunConfig& c) { return json(access(c)); },
          [access, range](RunConfig& c, const json& v, const std::string& where) {
            if (!v.is_array() || v.size() != 2)
              fail(where, str("expected a list of 2 numbers, got ", shown(v)));
            access(c) = {number_value(v[0], where + "[0]", range), number_value(v[1], where + "[1]", range)};
          }};
}

template <class Access>
Field choice(std::string path, Access access, std::string description) {
  using E = MemberType<Access>;
  return {std::move(path),
          "string",
          enum_choices<E>(),
          std::move(description),
          true,
          [access](const RunConfig& c) { return json(std::string(enum_name(access(c)))); },
          [access](RunConfig& c, const json& v, const std::string& where) {
            access(c) = enum_value<E>(v, where);
          }};
}

template <class Access>
Field device(std::string path, Access access, std::string description) {
  return {std::move(path),
          "string",
          "cpu, cuda, cuda:N, auto",
          std::move(description),
          true,
          [access](const RunConfig& c) { return json(access(c)); },
          [access](RunConfig& c, const json& v, const std::string& where) { access(c) = device_value(v, where); }};
}

// ---------------------------------------------------------------- per-layer overrides
// The key of a layer range: "3" for one layer, "0-1" for an inclusive range.
std::string range_key(int first, int last) {
  return first == last ? std::to_string(first) : str(first, "-", last);
}

// The inverse of range_key, and only that: digits without sign or leading zeros, and first <
// last in a range, so that every range has one spelling and to_json writes keys back as given.
std::pair<int, int> layer_range(const std::string& key, const std::string& where) {
  const auto layer = [](std::string_view text, int& out) {
    if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) return false;
    if (text.size() > 1 && text[0] == '0') return false;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && end == text.data() + text.size();
  };
  const std::string_view text = key;
  const std::size_t dash = text.find('-');
  int first = 0;
  int last = 0;
  const bool valid = layer(text.substr(0, dash), first) &&
                     layer(dash == std::string_view::npos ? text : text.substr(dash + 1), last) &&
                     (dash == std::string_view::npos || first < last);
  if (!valid) fail(where, "expected a layer (\"3\") or an inclusive range first-last with first < last (\"0-1\")");
  return {first, last};
}

// Parses attention.layers (defined below the schema, whose fields it uses).
std::vector<attention::LayerOverride> layer_overrides_value(const json& v, const std::string& where);

template <class Access>
Field layer_overrides(std::string path, Access access, std::string description) {
  return {std::move(path),
          "object",
          "layer or range -> attention keys",
          std::move(description),
          false,
          [access](const RunConfig& c) {
            json out = json::object();
            for (const attention::LayerOverride& o : access(c)) out[range_key(o.first, o.last)] = o.settings;
            return out;
          },
          [access](RunConfig& c, const json& v, const std::string& where) {
            access(c) = layer_overrides_value(v, where);
          }};
}

// The schema, in documentation order. Defaults are RunConfig's member initialisers.
std::vector<Field> make_schema() {
  return {
      choice(DARK_CONFIG_MEMBER(model.family),
             "architecture: llama (pre-norm blocks) or gemma3 (scaled embedding, sandwich norms, QK-norm, "
             "sliding-window local layers)"),
      integer(DARK_CONFIG_MEMBER(model.vocab_size), 0,
              "token vocabulary size; 0 = take it from the tokenizer"),
      integer(DARK_CONFIG_MEMBER(model.d_model), 1, "width of the residual stream"),
      integer(DARK_CONFIG_MEMBER(model.n_layers), 1, "decoder blocks"),
      integer(DARK_CONFIG_MEMBER(model.n_heads), 1, "query heads per attention layer; must divide d_model"),
      integer(DARK_CONFIG_MEMBER(model.n_kv_heads), 0,
              "key/value heads (grouped-query attention); must divide n_heads; 0 = n_heads"),
      integer(DARK_CONFIG_MEMBER(model.head_dim), 0, "per-head width of q, k and v; 0 = d_model / n_heads"),
      integer(DARK_CONFIG_MEMBER(model.d_ff), 0,
              "gated-MLP hidden width; 0 = the multiple of 64 nearest 8/3 d_model"),
      choice(DARK_CONFIG_MEMBER(model.mlp),
             "gated-MLP activation: SiLU, exact GELU or tanh-approximated GELU (geglu_tanh) gate"),
      number(DARK_CONFIG_MEMBER(model.rope_theta), positive(), "RoPE base frequency"),
      number(DARK_CONFIG_MEMBER(model.norm_eps), positive(), "RMSNorm epsilon"),
      boolean(DARK_CONFIG_MEMBER(model.tie_embeddings), "lm_head shares the token-embedding matrix"),
      number(DARK_CONFIG_MEMBER(model.dropout), unit_interval(true), "dropout probability"),
      number(DARK_CONFIG_MEMBER(model.init_std), positive(),
             "standard deviation of the normal weight initialisation"),
      integer(DARK_CONFIG_MEMBER(model.max_seq_len), 0,
              "the context the model was trained for (generate's limit where a layer keeps a growing key/value "
              "cache; exported as max_position_embeddings); 0 = data.seq_len, or with finetune.init_from "
              "max(the source's, data.seq_len)"),
      integer(DARK_CONFIG_MEMBER(model.sliding_window), 1,
              "gemma3: keys a local layer's query attends to, itself included"),
      integer(DARK_CONFIG_MEMBER(model.sliding_window_pattern), 1,
              "gemma3: every n-th layer (layers n-1, 2n-1, ...) is global, the others local; 1 = all global"),
      number(DARK_CONFIG_MEMBER(model.rope_local_theta), positive(), "gemma3: RoPE base frequency of the local layers"),

      choice(DARK_CONFIG_MEMBER(attention.kind),
             "attention mechanism of every layer (attention.layers overrides it per layer)"),
      integer(DARK_CONFIG_MEMBER(attention.num_features), 1,
              "random features per head, m (performer, lfk, darkformer); cost and accuracy grow with m"),
      choice(DARK_CONFIG_MEMBER(attention.draw),
             "how the random features are drawn: iid Gaussian rows, or orthogonal blocks (Haar "
             "rotations with chi-distributed row norms; lower variance)"),
      integer(DARK_CONFIG_MEMBER(attention.redraw_interval), 0,
              "optimizer steps between random-feature redraws in training; 0 = never (one draw per run)"),
      number(DARK_CONFIG_MEMBER(attention.eps), positive(),
             "guard added to the linear-attention denominator, in offset-scaled units (features "
             "rescaled so the largest so far is 1)"),
      choice(DARK_CONFIG_MEMBER(attention.mode),
             "linear = the random-feature estimate, linear in sequence length; exact = the same "
             "kernel evaluated exactly, quadratic (separates kernel from estimator; not lfk)"),
      choice(DARK_CONFIG_MEMBER(attention.proposal),
             "distribution of the feature draws: isotropic N(0, I), or variance_optimal N(0, C*) "
             "fitted on calibration batches (performer and darkformer in mode linear only)"),
      integer(DARK_CONFIG_MEMBER(attention.chunk_size), 1,
              "tokens per chunk of causal linear attention: a speed/memory trade-off, not a "
              "modelling choice"),
      integer(DARK_CONFIG_MEMBER(attention.calibration_batches), 1,
              "training batches measured before step 1 for darkformer.init whiten and proposal "
              "variance_optimal; unused otherwise"),
      choice(DARK_CONFIG_MEMBER(attention.windowed_layers),
             "what sliding-window layers (gemma3's local layers) run when kind is not softmax: softmax = exact "
             "windowed softmax (a swap replaces the global layers only), same = the configured kind"),
      integer(DARK_CONFIG_MEMBER(attention.exact_window), 0,
              "keys nearest each query (its own included) weighted by the kind's exact kernel, the farther ones "
              "by its random features, in one normaliser; 0 = none (performer, lfk, darkformer in mode linear; "
              "costs O(T W) more)"),
      choice(DARK_CONFIG_MEMBER(attention.far_field),
             "exact-window layers: the keys beyond the window get the kind's random features (features), or no "
             "weight (none = window only: sliding-window attention over the W nearest keys with the kind's exact "
             "kernel, in training, evaluation and decoding)"),
      boolean(DARK_CONFIG_MEMBER(attention.window_balance),
              "exact-window layers: a learned balance per query head between the window and the features (LoLCATs' "
              "window factor): the far keys' weights times exp(b), b a parameter (feature_map.window_balance) "
              "starting at 0; not exported by export-hf"),
      choice(DARK_CONFIG_MEMBER(attention.darkformer.scope),
             "DARKFormer: head = one learned M per (layer, key/value head); layer = one M per layer, shared by "
             "its heads"),
      integer(DARK_CONFIG_MEMBER(attention.darkformer.rank), 0,
              "DARKFormer: rows r of M (r x head dim); 0 = full rank (head dim); at most "
              "model.d_model / model.n_heads"),
      choice(DARK_CONFIG_MEMBER(attention.darkformer.init),
             "DARKFormer: M's initial value; identity = exactly Performer with the same features, "
             "whiten = from the queries' and keys' covariance on calibration batches"),
      choice(DARK_CONFIG_MEMBER(attention.lfk.init),
             "LFK: how the learned W (m x head dim) starts: a Performer feature draw of this kind"),
      layer_overrides(DARK_CONFIG_MEMBER(attention.layers),
                      "per-layer overrides, e.g. {\"0-1\": {\"kind\": \"softmax\"}}: any attention key but "
                      "layers, for a layer or an inclusive range; ranges disjoint, below model.n_layers; "
                      "{} = none"),

      text(DARK_CONFIG_MEMBER(data.corpus), true, "named corpus to build token shards from"),
      text_list(DARK_CONFIG_MEMBER(data.sources), "files, folders or glob patterns of text; when given, they replace data.corpus"),
      text(DARK_CONFIG_MEMBER(data.dir), false,
           "token-shard folder; \"\" = cache/data/<corpus or sources-<hash>>-<tokenizer>-<vocab_size> (-bos / -nobos "
           "with data.bos always / never)"),
      choice(DARK_CONFIG_MEMBER(data.tokenizer), "tokenizer family"),
      text(DARK_CONFIG_MEMBER(data.tokenizer_model), false,
           "existing tokenizer model file (.model for sentencepiece, the .gguf model for gguf, a Hugging Face "
           "tokenizer.json for hf); \"\" = train one on the corpus (sentencepiece)"),
      integer(DARK_CONFIG_MEMBER(data.vocab_size), 1, "vocabulary size of a tokenizer trained here"),
      number(DARK_CONFIG_MEMBER(data.val_fraction), open_unit_interval(),
             "share of the corpus held out for validation"),
      integer(DARK_CONFIG_MEMBER(data.seq_len), 1, "tokens per training window"),
      integer(DARK_CONFIG_MEMBER(data.val_windows), 1, "validation windows per evaluation"),
      choice(DARK_CONFIG_MEMBER(data.bos),
             "bos at every window start (and every document start in the shards): auto = as the tokenizer's "
             "metadata says (GGUF / Hugging Face add_bos_token; off for byte and SentencePiece trained here), "
             "always, never"),
      choice(DARK_CONFIG_MEMBER(data.windows),
             "where training and validation windows lie: document = inside one document each (a document's tail "
             "shorter than a window, and a shorter document, give none), packed = the documents joined end to end, "
             "windows crossing their boundaries (how every run before this key was trained)"),
      choice(DARK_CONFIG_MEMBER(data.task),
             "what the run trains on: text = windows of the tokenized corpus; mqar = the synthetic multi-query "
             "associative recall task (data.mqar; no corpus or tokenizer, model.vocab_size from data.mqar.vocab)"),
      integer_list(DARK_CONFIG_MEMBER(data.mqar.pairs), 1, 1 << 20,
                   "MQAR: key-value pairs per sequence, each sequence one of these (training: uniformly; validation: "
                   "equal shares); at most (data.seq_len + 1) / 4 and (data.mqar.vocab - 1) / 2"),
      integer(DARK_CONFIG_MEMBER(data.mqar.vocab), 3,
              "MQAR: vocabulary: 0 the filler, keys 1..(vocab - 1) / 2, values above them"),
      number(DARK_CONFIG_MEMBER(data.mqar.power), positive(),
             "MQAR: query slots after the pairs drawn with weight (slot + 1)^(power - 1) (Zoology's power_a; 1 = "
             "uniform, small = queries soon after the pairs)"),
      integer(DARK_CONFIG_MEMBER(data.mqar.val_sequences), 1,
              "MQAR: validation sequences (fixed, equal shares of each pairs count), all read by every evaluation"),
      integer(DARK_CONFIG_MEMBER(data.mqar.val_seed), 0, "MQAR: seed of the validation sequences (the run's seed keys "
                                                          "the training ones)"),

      choice(DARK_CONFIG_MEMBER(optimizer.name), "optimizer"),
      number(DARK_CONFIG_MEMBER(optimizer.lr), positive(), "peak learning rate"),
      number_pair(DARK_CONFIG_MEMBER(optimizer.betas), unit_interval(true),
                  "AdamW moment decay rates [beta1, beta2]"),
      number(DARK_CONFIG_MEMBER(optimizer.eps), positive(), "AdamW denominator epsilon"),
      number(DARK_CONFIG_MEMBER(optimizer.weight_decay), non_negative(), "decoupled weight decay"),
      number(DARK_CONFIG_MEMBER(optimizer.momentum), unit_interval(true), "SGD momentum (sgd only)"),
      text_list(DARK_CONFIG_MEMBER(optimizer.no_decay),
                "parameter-name glob patterns that get no weight decay"),
      number(DARK_CONFIG_MEMBER(optimizer.grad_clip), non_negative(),
             "clip the global gradient L2 norm to this; 0 = off"),

      choice(DARK_CONFIG_MEMBER(schedule.kind), "learning-rate decay after warm-up"),
      integer(DARK_CONFIG_MEMBER(schedule.warmup_steps), 0, "linear warm-up steps; at most training.steps (unless that is 0)"),
      number(DARK_CONFIG_MEMBER(schedule.min_lr_ratio), unit_interval(false),
             "final learning rate as a fraction of optimizer.lr"),

      integer(DARK_CONFIG_MEMBER(training.steps), 0,
              "optimizer steps; 0 (with finetune.init_from) = evaluate and save the source as swapped, after "
              "finetune.transfer if set: a run folder with those weights at step 0"),
      integer(DARK_CONFIG_MEMBER(training.batch_size), 1, "sequences per micro-batch"),
      integer(DARK_CONFIG_MEMBER(training.grad_accum), 1, "micro-batches accumulated per optimizer step"),
      integer(DARK_CONFIG_MEMBER(training.eval_interval), 1, "steps between validation runs"),
      integer(DARK_CONFIG_MEMBER(training.eval_batches), 1, "batches per validation run"),
      integer(DARK_CONFIG_MEMBER(training.checkpoint_interval), 0,
              "steps between checkpoints; 0 = only at the end"),
      integer(DARK_CONFIG_MEMBER(training.keep_checkpoints), 0, "most recent checkpoints kept; 0 = keep all"),
      integer(DARK_CONFIG_MEMBER(training.max_consecutive_skips), 0,
              "steps with a non-finite loss or gradient skipped in a row before the run aborts"),
      integer(DARK_CONFIG_MEMBER(training.log_interval), 1, "steps between log lines"),
      integer(DARK_CONFIG_MEMBER(training.generate_tokens), 0,
              "tokens sampled at the end of training; 0 = none"),
      text(DARK_CONFIG_MEMBER(training.generate_prompt), false, "prompt for that sample"),
      device(DARK_CONFIG_MEMBER(training.device),
             "where the model trains and runs: cpu; cuda or cuda:N (a GPU); auto (the first usable GPU, else "
             "the CPU)"),
      choice(DARK_CONFIG_MEMBER(training.precision),
             "f32, or bf16 mixed precision on a GPU: bf16 activations and matrix products with f32 accumulation; "
             "f32 master weights, gradients, optimizer state, norm / softmax / random-feature statistics and loss"),
      boolean(DARK_CONFIG_MEMBER(training.activation_checkpointing),
              "recompute each decoder block during backward instead of keeping its activations (less memory, "
              "about one more forward pass of time); same losses and gradients"),
      boolean(DARK_CONFIG_MEMBER(training.cuda_graph),
              "GPU: capture the forward and backward passes of a step once as a CUDA graph and launch that each step "
              "(one launch instead of one per kernel; same losses and gradients, dropout masks included); needs one "
              "process; steps that log attention statistics and the first step of a feature epoch run eagerly"),
      choice(DARK_CONFIG_MEMBER(training.memory_check),
             "when the estimated peak memory (logged at start-up) exceeds what the machine allows: error = refuse "
             "the run before allocating the model, warn = log a warning and go on, off = do not check"),
      boolean(DARK_CONFIG_MEMBER(training.flush_denormals),
              "CPU: compute subnormal floats (below 1.2e-38) as zero on every thread of the run (x86 FTZ and DAZ, "
              "AArch64 FZ), as GPUs do; x86 CPUs take 100+ cycles an operation on them, and long runs make them "
              "(a 3-5x slower step measured); false = IEEE gradual underflow"),

      boolean(DARK_CONFIG_MEMBER(evaluation.ablation),
              "the final evaluation also runs two ablations of the exact-window layers: window_only (the far keys "
              "get no weight) and features_only (no window), each with its loss by position (needs a layer with "
              "attention.exact_window > 0)"),
      integer_list(DARK_CONFIG_MEMBER(evaluation.passkey.lengths), 1, (1 << 24) - 1,
                   "passkey retrieval at the end of the run: prompt lengths in tokens of the run's tokenizer (bos "
                   "included), each at least the prompt without filler (about 70 tokens; 300 for the byte tokenizer)"),
      integer(DARK_CONFIG_MEMBER(evaluation.passkey.depths), 1,
              "passkey retrieval: needle depths, a grid of this many points from 0 (after the task line) to 1 "
              "(before the question); 1 = the middle"),
      integer(DARK_CONFIG_MEMBER(evaluation.passkey.trials), 0,
              "passkey retrieval: prompts per (length, depth), each with its own pass key; 0 = off. Results in "
              "<run>/passkey.json and metrics.jsonl (docs/long-context.md)"),
      integer(DARK_CONFIG_MEMBER(evaluation.passkey.seed), 0,
              "passkey retrieval: seed of the pass keys (the same prompts for every run with the same seed)"),
      integer_list(DARK_CONFIG_MEMBER(evaluation.copy.words), 2, static_cast<std::int64_t>(data::kCommonWordCount),
                   "copy task at the end of the run: list lengths in words (the distance back to a word's first occurrence "
                   "is about the list's words + 6 tokens with SmolLM2's and Gemma 3's tokenizers)"),
      integer(DARK_CONFIG_MEMBER(evaluation.copy.trials), 0,
              "copy task: random lists per length; 0 = off. Results in <run>/copy.json and metrics.jsonl"),
      integer(DARK_CONFIG_MEMBER(evaluation.copy.seed), 0, "copy task: seed of the word lists"),

      choice(DARK_CONFIG_MEMBER(distributed.backend),
             "how the ranks of a run started by mpirun communicate: auto = nccl for GPUs, mpi for the CPU (single "
             "in a plain process); mpi, nccl or single to force one"),
      number(DARK_CONFIG_MEMBER(distributed.bucket_mb), positive(),
             "gradient bucket size in MiB: a bucket's all-reduce starts as soon as backward has filled it"),
      integer(DARK_CONFIG_MEMBER(distributed.zero_stage), 0,
              "0 = every rank keeps the whole optimizer state; 1 = ZeRO stage 1, the optimizer state is sharded "
              "over the ranks (checkpoints stay whole)"),
      number(DARK_CONFIG_MEMBER(distributed.timeout_s), positive(),
             "seconds a collective may take before the job ends with an error naming the rank and the collective "
             "(a rank died or hangs)"),

      text(DARK_CONFIG_MEMBER(finetune.init_from), false,
           "start from these weights: a checkpoint, a run folder (its latest checkpoint), a .gguf model or a "
           "Hugging Face Llama folder; "
           "the model keys left unset are taken from it, attention may differ; \"\" = random initialisation"),
      text_list(DARK_CONFIG_MEMBER(finetune.trainable),
                "parameter-name globs that train (the rest is frozen: no gradient, no optimizer state), or "
                "presets: all, limited_attention (q_proj, k_proj, v_proj and the attention feature maps)"),
      integer(DARK_CONFIG_MEMBER(finetune.transfer.steps), 0,
              "attention transfer before finetuning: optimizer steps (of training.batch_size training windows) that "
              "fit each swapped layer to its exact attention output on the frozen source model; 0 = none"),
      number(DARK_CONFIG_MEMBER(finetune.transfer.lr), positive(),
             "attention transfer: AdamW learning rate (constant, no weight decay)"),
      text_list(DARK_CONFIG_MEMBER(finetune.transfer.trainable),
                "attention transfer: what trains in the swapped layers: presets feature_map (the kind's own "
                "parameters), qk (and q_proj, k_proj: performer has no parameters of its own), qkv (and v_proj), "
                "or parameter-name globs"),
      number(DARK_CONFIG_MEMBER(finetune.transfer.output_weight), non_negative(),
             "attention transfer: weight of the output term, |out - exact|^2 / |exact|^2 per swapped layer"),
      number(DARK_CONFIG_MEMBER(finetune.transfer.attention_weight), non_negative(),
             "attention transfer: weight of the attention-weight term, KL(exact weights || the kernel's) in nats on "
             "sampled query rows (what keeps a layer from fitting by going silent)"),
      integer(DARK_CONFIG_MEMBER(finetune.transfer.attention_rows), 1,
              "attention transfer: query rows per sequence the attention-weight term is computed on (drawn anew "
              "each step; the measurements use as many evenly spaced rows)"),
      integer(DARK_CONFIG_MEMBER(finetune.transfer.redraw_interval), 0,
              "attention transfer: steps between feature redraws (feature epochs 1, 2, ...; epoch 0, the draw "
              "finetuning starts with, is held out for the measurements); 0 = one draw throughout"),
      number(DARK_CONFIG_MEMBER(finetune.transfer.window_dropout), unit_interval(true),
             "attention transfer: probability that a step runs a swapped layer without its exact window (features "
             "only), falling linearly to 0 over the transfer; 0 = off"),
      integer(DARK_CONFIG_MEMBER(finetune.transfer.eval_batches), 1,
              "attention transfer: validation batches each swapped layer's error is measured on, before and after"),
      integer(DARK_CONFIG_MEMBER(finetune.transfer.checkpoint_interval), 0,
              "attention transfer: steps between saves of its state (in <run>/transfer/), which `train --resume` "
              "continues; 0 = only when stopped by SIGTERM or SIGINT"),

      text(DARK_CONFIG_MEMBER(output.dir), false,
           "run folder (checkpoints, metrics, config.json); \"\" = runs/<config file stem>"),
      boolean(DARK_CONFIG_MEMBER(output.tensorboard),
              "a TensorBoard event file in the run folder (events.out.tfevents.*: every metrics.jsonl number as a "
              "scalar, the config and the sample as text); tensorboard --logdir runs shows every run"),

      choice(DARK_CONFIG_MEMBER(stability.rule),
             "how a loss or gradient-norm spike is told from batch noise: robust = above the running level "
             "(median of the last window / 5 steps) by more than sigmas noise sd (robust, from step-to-step "
             "differences over the window) and by an absolute margin, counted as events with height and recovery; "
             "ratio = every step above factor x the median of the window (earlier reports)"),
      integer(DARK_CONFIG_MEMBER(stability.window), 1,
              "previous steps a step's loss and gradient norm are compared with: the noise is measured over them, "
              "the level over the last window / 5"),
      number(DARK_CONFIG_MEMBER(stability.loss_sigmas), positive(),
             "robust rule: a loss spike exceeds the level by more than loss_sigmas noise sd ..."),
      number(DARK_CONFIG_MEMBER(stability.loss_margin), non_negative(),
             "... and by more than loss_margin nats (what batch noise alone does not reach)"),
      number(DARK_CONFIG_MEMBER(stability.grad_sigmas), positive(),
             "robust rule: a gradient-norm spike exceeds the level of the log norms by more than grad_sigmas noise "
             "sd ..."),
      number(DARK_CONFIG_MEMBER(stability.grad_margin), {1.0, true, std::nullopt, false},
             "... and the (unclipped) norm exceeds grad_margin x its level"),
      number(DARK_CONFIG_MEMBER(stability.loss_factor), {1.0, true, std::nullopt, false},
             "ratio rule: a loss spike is a step whose loss exceeds loss_factor x that median"),
      number(DARK_CONFIG_MEMBER(stability.grad_factor), {1.0, true, std::nullopt, false},
             "ratio rule: a gradient-norm spike is a step whose (unclipped) norm exceeds grad_factor x that median"),
      integer(DARK_CONFIG_MEMBER(stability.redraw_eval_batches), 0,
              "validation batches evaluated with the weights fixed just before and just after each random-feature "
              "redraw (the redraw's held-out shock, in metrics.jsonl); 0 = off"),
      integer(DARK_CONFIG_MEMBER(stability.redraw_window), 1,
              "K: a redraw's loss jump is the mean training loss of the K steps from it minus that of the K steps "
              "before"),
      boolean(DARK_CONFIG_MEMBER(stability.stop_on_divergence),
              "end a run at its first non-finite or skipped step, or loss above the initial loss after "
              "warm-up, writing stability.json and no checkpoint (saves sweep time)"),

      integer(DARK_CONFIG_MEMBER(seed), 0,
              "root of every random stream (initialisation, data order, dropout, features)"),
  };
}

#undef DARK_CONFIG_MEMBER

const std::vector<Field>& schema() {
  static const std::vector<Field> fields = make_schema();
  return fields;
}

const Field* find_field(const std::string& path) {
  for (const Field& f : schema()) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

std::string join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

std::string parent_of(const std::string& path) {
  const std::size_t dot = path.rfind('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}

std::string leaf_of(const std::string& path) {
  const std::size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

// A section is a JSON object of the schema: a proper prefix of some field's path.
bool is_section(const std::string& path) {
  for (const Field& f : schema()) {
    if (f.path.starts_with(path + ".")) return true;
  }
  return false;
}

// Every name below `root` ("" = the whole config), relative to it, in documentation order:
// each section just before its first field ("darkformer", then "darkformer.scope").
std::vector<std::string> names_below(const std::string& root) {
  std::vector<std::string> names;
  const auto add = [&names](const std::string& name) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  };
  for (const Field& f : schema()) {
    if (!root.empty() && !f.path.starts_with(root + ".")) continue;
    const std::string rel = root.empty() ? f.path : f.path.substr(root.size() + 1);
    for (std::size_t dot = rel.find('.'); dot != std::string::npos; dot = rel.find('.', dot + 1))
      add(rel.substr(0, dot));
    add(rel);
  }
  return names;
}

// The names directly inside `section`, comma-separated ("" = the top-level names).
std::string children_of(const std::string& section) {
  std::string out;
  for (const std::string& name : names_below(section)) {
    if (name.find('.') == std::string::npos) out += (out.empty() ? "" : ", ") + name;
  }
  return out;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Where the keys of a JSON object point: schema paths below `root` ("" = the whole config),
// named in errors below `shown`. A per-layer override's keys: root "attention", shown
// "attention.layers.0-1".
struct Scope {
  std::string root;
  std::string shown;
};

// "config: PATH: unknown key (did you mean CLOSEST?)", CLOSEST relative to the scope's root;
// without a close key, the keys that do exist in the nearest enclosing section.
[[noreturn]] void unknown_key(const std::string& rel, const Scope& scope) {
  const std::string where = join(scope.shown, rel);
  const std::string leaf = leaf_of(rel);
  std::size_t best_score = std::numeric_limits<std::size_t>::max();
  std::string best;
  for (const std::string& c : names_below(scope.root)) {
    // A key typed into the wrong section ("optimizer.warmup_steps") is close too.
    const std::size_t score = std::min(edit_distance(rel, c), edit_distance(leaf, leaf_of(c)) + 1);
    if (score < best_score) {
      best_score = score;
      best = c;
    }
  }
  if (best_score <= std::max<std::size_t>(2, leaf.size() / 3))
    fail(where, str("unknown key (did you mean ", best, "?)"));
  std::string section = parent_of(rel);
  while (!section.empty() && !is_section(join(scope.root, section))) section = parent_of(section);
  section = join(scope.root, section);
  if (section.empty()) fail(where, str("unknown key (top-level keys: ", children_of(""), ")"));
  fail(where, str("unknown key (", section, " has: ", children_of(section), ")"));
}

using Visit = std::function<void(const Field&, const json& value, const std::string& where)>;

// Calls `visit` for every field `object` sets, recursing into sections (which must be
// objects); an unknown key is an error. `rel` is the object's own path below the scope's root.
void for_each_setting(const json& object, const Scope& scope, const Visit& visit, const std::string& rel = "") {
  for (const auto& [key, value] : object.items()) {
    const std::string key_rel = join(rel, key);
    const std::string path = join(scope.root, key_rel);
    const std::string where = join(scope.shown, key_rel);
    if (const Field* field = find_field(path)) {
      visit(*field, value, where);
    } else if (is_section(path)) {
      if (!value.is_object()) fail(where, str("expected an object, got ", shown(value)));
      for_each_setting(value, scope, visit, key_rel);
    } else {
      unknown_key(key_rel, scope);
    }
  }
}

std::string dotted_to_pointer(const std::string& path) {
  std::string pointer = "/" + path;
  std::replace(pointer.begin(), pointer.end(), '.', '/');
  return pointer;
}

// Sets a per-layer override's attention keys on `config` through the fields' own setters
// (errors name `shown`.KEY) and returns them as the setters stored them (2e3 -> 2000).
json set_attention_settings(RunConfig& config, const json& settings, const std::string& shown) {
  const Scope scope{"attention", shown};
  json stored = json::object();
  for_each_setting(settings, scope, [&](const Field& f, const json& value, const std::string& where) {
    if (f.path == "attention.layers") fail(where, "not allowed inside a per-layer override");
    f.set(config, value, where);
    stored[json::json_pointer(dotted_to_pointer(f.path.substr(scope.root.size() + 1)))] = f.get(config);
  });
  return stored;
}

std::vector<attention::LayerOverride> layer_overrides_value(const json& v, const std::string& where) {
  if (!v.is_object()) fail(where, str("expected an object mapping layers to attention keys, got ", shown(v)));
  std::vector<attention::LayerOverride> overrides;
  for (const auto& [key, settings] : v.items()) {
    const std::string at = where + "." + key;
    const auto [first, last] = layer_range(key, at);
    if (!settings.is_object()) fail(at, str("expected an object of attention keys, got ", shown(settings)));
    RunConfig scratch;
    overrides.push_back({first, last, set_attention_settings(scratch, settings, at)});
  }
  return overrides;
}

std::string override_path(const attention::LayerOverride& o) {
  return "attention.layers." + range_key(o.first, o.last);
}

// Every override inside the model, and no layer in two of them.
void validate_layer_ranges(const std::vector<attention::LayerOverride>& overrides, int n_layers) {
  std::vector<const attention::LayerOverride*> by_first;
  for (const attention::LayerOverride& o : overrides) by_first.push_back(&o);
  std::stable_sort(by_first.begin(), by_first.end(), [](auto* a, auto* b) { return a->first < b->first; });
  const attention::LayerOverride* furthest = nullptr;  // of those before, the one reaching furthest
  for (const attention::LayerOverride* o : by_first) {
    if (o->last >= n_layers)
      fail(override_path(*o), str("layer ", o->last, " does not exist (model.n_layers = ", n_layers, ")"));
    if (furthest != nullptr && o->first <= furthest->last)
      fail(override_path(*o),
           str("overlaps ", override_path(*furthest), " (both cover layer ", o->first, ")"));
    if (furthest == nullptr || o->last > furthest->last) furthest = o;
  }
}

}  // namespace

// ---------------------------------------------------------------- public API
const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = [] {
    const RunConfig defaults;
    std::vector<ConfigKey> out;
    for (const Field& f : schema())
      out.push_back({f.path, f.type, f.get(defaults).dump(), f.allowed, f.description});
    return out;
  }();
  return keys;
}

namespace {
// The base attention settings with the overrides of `layer` applied, before windowed layers
// are considered.
attention::AttentionConfig configured_attention(const RunConfig& config, int layer) {
  RunConfig effective;
  effective.attention = config.attention;
  effective.attention.layers.clear();
  for (const attention::LayerOverride& o : config.attention.layers) {
    if (o.first <= layer && layer <= o.last) set_attention_settings(effective, o.settings, override_path(o));
  }
  effective.attention.seed = config.seed;
  return effective.attention;
}
}  // namespace

bool keeps_windowed_softmax(const RunConfig& config, int layer) {
  const attention::AttentionConfig a = configured_attention(config, layer);
  return config.model.is_local_layer(layer) && a.kind != attention::Kind::softmax &&
         a.windowed_layers == attention::WindowedLayers::softmax;
}

attention::AttentionConfig attention_for_layer(const RunConfig& config, int layer) {
  attention::AttentionConfig a = configured_attention(config, layer);
  if (keeps_windowed_softmax(config, layer)) {
    // The layer runs exact windowed softmax; the random-feature options do not apply to it.
    a.kind = attention::Kind::softmax;
    a.mode = attention::Mode::linear;
    a.proposal = attention::Proposal::isotropic;
    a.exact_window = 0;
    a.far_field = attention::FarField::features;
    a.window_balance = false;
  }
  return a;
}

namespace {
// The data section of the run a checkpoint (or a run folder's latest checkpoint) belongs to,
// from its state.json alone; nothing when `path` holds no checkpoint of ours.
std::optional<data::DataConfig> checkpoint_data_config(const std::string& path) {
  std::filesystem::path dir;
  try {
    dir = formats::find_checkpoint(path);
  } catch (const Error&) {
    return std::nullopt;
  }
  const nlohmann::json state = nlohmann::json::parse(read_file(dir / "state.json"), nullptr, false);
  if (state.is_discarded() || !state.contains("config")) return std::nullopt;
  return parse_config(state["config"]).data;
}
}  // namespace

void resolve_config(RunConfig& config, const std::string& config_stem) {
  // A GGUF model brings its own tokenizer: use it unless the document chose one.
  // So does a Hugging Face folder (its tokenizer.model or tokenizer.json).
  const std::string& init_from = config.finetune.init_from;
  bool folder_tokenizer = false;
  if (init_from.ends_with(".gguf") && !config.given.contains("data.tokenizer")) {
    config.data.tokenizer = data::TokenizerKind::gguf;
    if (!config.given.contains("data.tokenizer_model")) config.data.tokenizer_model = init_from;
  } else if (!config.given.contains("data.tokenizer") && formats::is_hf_model_folder(init_from)) {
    const formats::HfTokenizerFile file = formats::hf_tokenizer_file(init_from);
    config.data.tokenizer = file.kind;
    if (!config.given.contains("data.tokenizer_model")) {
      config.data.tokenizer_model = file.path;
      folder_tokenizer = true;
    }
  } else if (!config.given.contains("data.tokenizer") && !init_from.empty() && !init_from.ends_with(".gguf")) {
    // One of our checkpoints (a transfer-only run of a GGUF model, say): its run's tokenizer.
    // A path that is none is left for loading to report.
    const std::optional<data::DataConfig> theirs = checkpoint_data_config(init_from);
    if (theirs) {
      config.data.tokenizer = theirs->tokenizer;
      if (!config.given.contains("data.tokenizer_model")) config.data.tokenizer_model = theirs->tokenizer_model;
      if (!config.given.contains("data.vocab_size")) config.data.vocab_size = theirs->vocab_size;
    }
  }
  nn::ModelConfig& m = config.model;
  m = m.resolved();
  if (m.max_seq_len == 0) m.max_seq_len = config.data.seq_len;
  // MQAR has no tokenizer: the task's vocabulary sizes the model.
  if (config.data.task == data::DataTask::mqar && m.vocab_size == 0) m.vocab_size = config.data.mqar.vocab;
  data::DataConfig& d = config.data;
  if (d.dir.empty()) {
    // Custom sources get a folder of their own (named by a hash of the list), so they never
    // rebuild, and so replace, a named corpus's prepared data.
    std::string name = d.corpus;
    if (!d.sources.empty()) {
      std::uint64_t h = kNameHashStart;
      for (const std::string& s : d.sources) h = fnv1a64(s + '\n', h);
      name = "sources-" + hex64(h);
    }
    // A trained tokenizer is named by its vocabulary size; a GGUF model's by the model file, a
    // Hugging Face folder's (tokenizer.json, or tokenizer.model from init_from) by the folder.
    const std::filesystem::path model_file = std::filesystem::path(d.tokenizer_model).lexically_normal();
    const std::string tokenizer_tag =
        d.tokenizer == data::TokenizerKind::gguf                   ? model_file.stem().string()
        : d.tokenizer == data::TokenizerKind::hf || folder_tokenizer ? model_file.parent_path().filename().string()
                                                                     : std::to_string(d.vocab_size);
    // A bos rule other than auto gets its own folder, so switching it never rebuilds another's.
    const std::string bos_tag = d.bos == data::BosRule::always ? "-bos" : d.bos == data::BosRule::never ? "-nobos" : "";
    d.dir = str("cache/data/", name, "-", enum_name(d.tokenizer), "-", tokenizer_tag, bos_tag);
  }
  if (config.output.dir.empty())
    config.output.dir = "runs/" + (config_stem.empty() ? std::string("default") : config_stem);
}

namespace {
// data.task mqar: the task can be made at data.seq_len, the model reads its vocabulary, and
// nothing that needs text (a tokenizer, a pretrained source, prompts) is asked for.
void validate_mqar(const RunConfig& config) {
  const data::MqarConfig& q = config.data.mqar;
  if (const std::string problem = data::mqar_config_problem(q, config.data.seq_len); !problem.empty())
    throw Error("config: " + problem);
  if (config.model.vocab_size != 0 && config.model.vocab_size < q.vocab)
    fail("model.vocab_size", str(config.model.vocab_size, " is smaller than data.mqar.vocab (", q.vocab,
                                 "): leave it 0 to take the task's vocabulary"));
  if (!config.finetune.init_from.empty())
    fail("finetune.init_from", "data.task mqar trains from scratch on the task's own vocabulary: a pretrained "
                               "source's token ids mean something else; leave it \"\" (or use data.task text)");
  if (config.evaluation.passkey.trials > 0)
    fail("evaluation.passkey.trials", "passkey retrieval prompts are text: data.task mqar has no tokenizer; set 0 "
                                      "(MQAR reports its own recall accuracy at every evaluation)");
  if (config.evaluation.copy.trials > 0)
    fail("evaluation.copy.trials", "the copy task's lists are text: data.task mqar has no tokenizer; set 0 (MQAR "
                                   "reports its own recall accuracy at every evaluation)");
}
}  // namespace

void validate_config(const RunConfig& config) {
  // Per-field types and ranges: the same checks parsing applies, on the current values.
  RunConfig scratch = config;
  for (const Field& f : schema()) f.set(scratch, f.get(config), f.path);

  const nn::ModelConfig& m = config.model;
  m.validate();
  validate_layer_ranges(config.attention.layers, m.n_layers);
  // After the range checks: each layer's effective settings are then the base and at most
  // one override, so checking once per override covers every layer.
  attention::validate(config.attention, m.head_size(), "attention");
  for (const attention::LayerOverride& o : config.attention.layers)
    attention::validate(attention_for_layer(config, o.first), m.head_size(), override_path(o));
  if (m.max_seq_len != 0 && m.max_seq_len < config.data.seq_len) {
    fail("model.max_seq_len", str(m.max_seq_len, " is less than data.seq_len (", config.data.seq_len, ")"));
  }
  if (config.training.steps == 0 && config.finetune.init_from.empty()) {
    fail("training.steps", "is 0: a run of no steps evaluates and saves its finetune.init_from source (after "
                           "finetune.transfer, if set); set one");
  }
  // A run of no steps (transfer or import only) never reaches its schedule: a finetuning
  // config's warm-up does not have to be removed to make one.
  if (config.training.steps > 0 && config.schedule.warmup_steps > config.training.steps) {
    fail("schedule.warmup_steps",
         str(config.schedule.warmup_steps, " exceeds training.steps (", config.training.steps, ")"));
  }
  if (config.data.tokenizer == data::TokenizerKind::gguf && config.data.tokenizer_model.empty()) {
    fail("data.tokenizer_model", "tokenizer \"gguf\" reads its vocabulary from a .gguf model file: set "
                                 "data.tokenizer_model (or finetune.init_from to that file)");
  }
  if (config.data.tokenizer == data::TokenizerKind::hf && config.data.tokenizer_model.empty()) {
    fail("data.tokenizer_model", "tokenizer \"hf\" reads a Hugging Face tokenizer.json: set data.tokenizer_model "
                                 "(or finetune.init_from to the model's folder)");
  }
  if (config.evaluation.ablation) {
    // The base settings or an override (the layer count of a finetuning run is its source's, not known yet).
    bool windowed = config.attention.exact_window > 0;
    for (const attention::LayerOverride& o : config.attention.layers)
      windowed = windowed || attention_for_layer(config, o.first).exact_window > 0;
    if (!windowed) {
      fail("evaluation.ablation", "needs a layer with an exact window (attention.exact_window > 0 on a performer, lfk "
                                  "or darkformer layer in mode linear): there is no window and no far field to take apart");
    }
  }
  if (config.distributed.zero_stage > 1) {
    fail("distributed.zero_stage", str(config.distributed.zero_stage, " is not supported: use 0 or 1"));
  }
  if (config.finetune.transfer.steps > 0 && config.finetune.init_from.empty()) {
    fail("finetune.transfer.steps", "attention transfer fits swapped layers to a pretrained model's attention: set "
                                    "finetune.init_from to that model (or finetune.transfer.steps to 0)");
  }
  if (config.finetune.transfer.output_weight == 0 && config.finetune.transfer.attention_weight == 0) {
    fail("finetune.transfer.attention_weight", "and finetune.transfer.output_weight are both 0: the transfer would fit "
                                               "nothing; give one of them a weight");
  }
  if (config.finetune.transfer.trainable.empty()) {
    fail("finetune.transfer.trainable", "is empty: nothing would train; use [\"feature_map\"], [\"qk\"] or globs");
  }
  if (config.finetune.trainable.empty()) {
    fail("finetune.trainable", "is empty: nothing would train; use [\"all\"] or name parameter globs");
  }
  // The recall tasks key their prompts by trial in 20 bits (data/passkey_prompt.h, copy_prompt.h).
  for (const auto& [path, trials] : {std::pair{"evaluation.passkey.trials", config.evaluation.passkey.trials},
                                     std::pair{"evaluation.copy.trials", config.evaluation.copy.trials}})
    if (trials >= (1 << 20)) fail(path, str(trials, " exceeds ", (1 << 20) - 1));
  if (config.data.task == data::DataTask::mqar) validate_mqar(config);
  if (config.optimizer.momentum != 0.0 && config.optimizer.name != nn::OptimizerKind::sgd) {
    fail("optimizer.momentum",
         str(number_text(config.optimizer.momentum), " is only used by optimizer.name \"sgd\" (this is \"",
             enum_name(config.optimizer.name), "\"); remove it or set 0"));
  }
}

RunConfig parse_saved_config(const json& saved) {
  json doc = saved;
  // Runs from before data.windows cut packed windows.
  if (doc.is_object() && doc.contains("data") && doc["data"].is_object() && !doc["data"].contains("windows"))
    doc["data"]["windows"] = std::string(enum_name(data::WindowMode::packed));
  return parse_config(doc);
}

RunConfig parse_config(const json& doc, const std::string& config_stem) {
  if (!doc.is_object()) throw Error(str("config: expected a JSON object at the top level, got ", shown(doc)));
  RunConfig config;
  for_each_setting(doc, Scope{}, [&config](const Field& f, const json& value, const std::string& where) {
    f.set(config, value, where);
    config.given.insert(f.path);
  });
  resolve_config(config, config_stem);
  validate_config(config);
  return config;
}

namespace {

template <class Json>
Json read_json_with_comments(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw Error(str("config: cannot read ", path.string(), ": it is a directory"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(str("config: cannot read ", path.string(), ": ", std::strerror(errno)));
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    return Json::parse(buffer.str(), json_depth_limit<Json>(), /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const Error& e) {
    throw Error(str("config: ", path.string(), ": invalid JSON: ", e.what()));
  } catch (const json::exception& e) {
    // e.what(): "[json.exception.parse_error.101] parse error at line 3, column 8: syntax ...",
    // or out_of_range.406 "number overflow parsing '1e999'" for a number past double's range.
    const std::string what = e.what();
    const std::string marker = "parse error at ";
    const std::size_t at = what.find(marker);
    if (at != std::string::npos) {
      throw Error(str("config: ", path.string(), ": invalid JSON at ", what.substr(at + marker.size())));
    }
    const std::size_t tag_end = what.find("] ");
    throw Error(str("config: ", path.string(), ": invalid JSON: ",
                    tag_end == std::string::npos ? what : what.substr(tag_end + 2)));
  }
}

}  // namespace

json read_config_json(const std::filesystem::path& path) { return read_json_with_comments<json>(path); }

nlohmann::ordered_json read_ordered_config_json(const std::filesystem::path& path) {
  return read_json_with_comments<nlohmann::ordered_json>(path);
}

void apply_override(json& doc, const std::string& assignment) {
  const std::size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw Error(str("config: override \"", assignment, "\": expected key=value, e.g. training.steps=200"));
  }
  const std::string path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  const Field* field = find_field(path);
  if (field == nullptr) unknown_key(path, Scope{});
  json value;
  try {
    value = json::parse(text, json_depth_limit(), /*allow_exceptions=*/false);
  } catch (const Error& e) {
    fail(path, str("override value: ", e.what()));
  }
  if (value.is_discarded() || (field->takes_text && !value.is_string())) value = text;
  // JSON text is UTF-8 (the parser checks a document's strings); bare text must be too, or
  // the resolved config.json could not be written.
  try {
    (void)value.dump();
  } catch (const json::type_error&) {
    fail(path, str("override value \"", shown(value).substr(1), " is not valid UTF-8"));
  }
  if (doc.is_null()) doc = json::object();
  if (!doc.is_object()) throw Error(str("config: expected a JSON object at the top level, got ", shown(doc)));
  // The sections on the way must be objects where the document already has them.
  const json* node = &doc;
  for (std::size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', dot + 1)) {
    const std::string section = path.substr(0, dot);
    if (!node->contains(leaf_of(section))) break;
    node = &node->at(leaf_of(section));
    if (!node->is_object()) fail(section, str("expected an object, got ", shown(*node)));
  }
  doc[json::json_pointer(dotted_to_pointer(path))] = std::move(value);
}

metrics::StabilityOptions stability_options(const RunConfig& config) {
  metrics::StabilityOptions o;
  static_cast<metrics::StabilityConfig&>(o) = config.stability;
  o.warmup_steps = config.schedule.warmup_steps;
  o.redraw_interval = config.attention.redraw_interval;
  return o;
}

RunConfig load_config(const std::filesystem::path& path, const std::vector<std::string>& overrides) {
  json doc = read_config_json(path);
  for (const std::string& o : overrides) apply_override(doc, o);
  return parse_config(doc, path.stem().string());
}

json to_json(const RunConfig& config) {
  json doc = json::object();
  for (const Field& f : schema()) doc[json::json_pointer(dotted_to_pointer(f.path))] = f.get(config);
  return doc;
}

void write_resolved(const RunConfig& config, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(str("config: cannot create ", dir.string(), ": ", ec.message()));
  write_file_atomic(dir / "config.json", to_json(config).dump(2) + "\n");
}

std::string config_table(const RunConfig& config) {
  const RunConfig defaults;
  std::size_t width = 0;
  for (const Field& f : schema()) width = std::max(width, f.path.size());
  std::string out;
  for (const Field& f : schema()) {
    const std::string value = f.get(config).dump();
    const std::string default_value = f.get(defaults).dump();
    out += f.path + std::string(width + 2 - f.path.size(), ' ') + value;
    if (value != default_value) out += "  (default " + default_value + ")";
    out += '\n';
  }
  return out;
}

std::string config_markdown_table() {
  // Backticks keep globs like *norm* literal; a | would end the cell and <corpus> would read
  // as an HTML tag outside backticks.
  const auto cell = [](const std::string& s, bool code) {
    std::string escaped;
    for (const char ch : s) {
      if (ch == '|') escaped += '\\';
      if (ch == '<' && !code) {
        escaped += "&lt;";
        continue;
      }
      escaped += ch;
    }
    return code && !escaped.empty() ? "`" + escaped + "`" : escaped;
  };
  std::string out = "| key | type | default | allowed | description |\n|---|---|---|---|---|\n";
  for (const ConfigKey& k : config_keys()) {
    out += "| " + cell(k.path, true) + " | " + cell(k.type, false) + " | " + cell(k.default_value, true) +
           " | " + cell(k.allowed, false) + " | " + cell(k.description, false) + " |\n";
  }
  return out;
}

}  // namespace dark::train
