// The run-configuration schema (one table, make_schema()) and everything it drives: parsing
// with type/range checks, unknown-key suggestions, overrides, auto-value resolution,
// cross-field validation, JSON output and the documentation tables. See config.h.
#include "train/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <type_traits>

#include "core/error.h"
#include "core/file_io.h"

namespace dark::train {

namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& path, const std::string& message) {
  throw Error(str("config: ", path, ": ", message));
}

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
      fail(path, str("expected ", range, " <= ", type_max, ", got ", v.dump()));
    x = static_cast<std::int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<std::int64_t>();
  } else if (v.is_number_float()) {
    // 1e3 is an integer written as a float; 2.5 is not.
    const double d = v.get<double>();
    if (d != std::floor(d) || std::fabs(d) > 9.0e18) fail(path, str("expected an integer, got ", v.dump()));
    x = static_cast<std::int64_t>(d);
  } else {
    fail(path, str("expected an integer, got ", v.dump()));
  }
  if (x < min) fail(path, str("expected ", range, ", got ", v.dump()));
  if (x > type_max) fail(path, str("expected ", range, " <= ", type_max, ", got ", v.dump()));
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
  if (!v.is_number()) fail(path, str("expected a number, got ", v.dump()));
  const double x = v.get<double>();
  if (!range.contains(x)) fail(path, str("expected ", range.description(), ", got ", v.dump()));
  return x;
}

bool boolean_value(const json& v, const std::string& path) {
  if (!v.is_boolean()) fail(path, str("expected true or false, got ", v.dump()));
  return v.get<bool>();
}

std::string string_value(const json& v, const std::string& path, bool non_empty) {
  if (!v.is_string()) fail(path, str("expected a string, got ", v.dump()));
  std::string s = v.get<std::string>();
  if (non_empty && s.empty()) fail(path, "expected a non-empty string, got \"\"");
  return s;
}

std::vector<std::string> string_list_value(const json& v, const std::string& path) {
  if (!v.is_array()) fail(path, str("expected a list of strings, got ", v.dump()));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    out.push_back(string_value(v[i], str(path, "[", i, "]"), false));
  }
  return out;
}

template <class E>
std::string enum_choices(const char* separator) {
  std::string out;
  for (const auto& [value, name] : EnumNames<E>::table) {
    if (!out.empty()) out += separator;
    out += name;
  }
  return out;
}

template <class E>
E enum_value(const json& v, const std::string& path) {
  if (!v.is_string()) fail(path, str("expected one of ", enum_choices<E>(", "), ", got ", v.dump()));
  const std::string s = v.get<std::string>();
  for (const auto& [value, name] : EnumNames<E>::table) {
    if (name == s) return value;
  }
  fail(path, str(v.dump(), " is not one of ", enum_choices<E>(", ")));
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
              fail(where, str("expected a list of 2 numbers, got ", v.dump()));
            access(c) = {number_value(v[0], where + "[0]", range), number_value(v[1], where + "[1]", range)};
          }};
}

template <class Access>
Field choice(std::string path, Access access, std::string description) {
  using E = MemberType<Access>;
  return {std::move(path),
          "string",
          enum_choices<E>(", "),
          std::move(description),
          true,
          [access](const RunConfig& c) { return json(std::string(enum_name(access(c)))); },
          [access](RunConfig& c, const json& v, const std::string& where) {
            access(c) = enum_value<E>(v, where);
          }};
}

// The schema, in documentation order. Defaults are RunConfig's member initialisers.
std::vector<Field> make_schema() {
  return {
      integer(DARK_CONFIG_MEMBER(model.vocab_size), 0,
              "token vocabulary size; 0 = take it from the tokenizer"),
      integer(DARK_CONFIG_MEMBER(model.d_model), 1, "width of the residual stream"),
      integer(DARK_CONFIG_MEMBER(model.n_layers), 1, "decoder blocks"),
      integer(DARK_CONFIG_MEMBER(model.n_heads), 1, "query heads per attention layer; must divide d_model"),
      integer(DARK_CONFIG_MEMBER(model.n_kv_heads), 0,
              "key/value heads (grouped-query attention); must divide n_heads; 0 = n_heads"),
      integer(DARK_CONFIG_MEMBER(model.d_ff), 0,
              "gated-MLP hidden width; 0 = the multiple of 64 nearest 8/3 d_model"),
      choice(DARK_CONFIG_MEMBER(model.mlp), "gated-MLP activation (SiLU or GELU gate)"),
      number(DARK_CONFIG_MEMBER(model.rope_theta), positive(), "RoPE base frequency"),
      number(DARK_CONFIG_MEMBER(model.norm_eps), positive(), "RMSNorm epsilon"),
      boolean(DARK_CONFIG_MEMBER(model.tie_embeddings), "lm_head shares the token-embedding matrix"),
      number(DARK_CONFIG_MEMBER(model.dropout), unit_interval(true), "dropout probability"),
      number(DARK_CONFIG_MEMBER(model.init_std), positive(),
             "standard deviation of the normal weight initialisation"),
      integer(DARK_CONFIG_MEMBER(model.max_seq_len), 0,
              "longest sequence the model accepts (RoPE table length); 0 = data.seq_len"),

      choice(DARK_CONFIG_MEMBER(attention.kind),
             "attention mechanism; the model builder rejects kinds this build does not implement"),
      integer(DARK_CONFIG_MEMBER(attention.num_features), 1,
              "random features per head (random-feature kinds)"),

      text(DARK_CONFIG_MEMBER(data.corpus), true, "named corpus to build token shards from"),
      text_list(DARK_CONFIG_MEMBER(data.sources), "files, folders or glob patterns of text; when given, they replace data.corpus"),
      text(DARK_CONFIG_MEMBER(data.dir), false,
           "token-shard folder; \"\" = cache/data/<corpus or sources-<hash>>-<tokenizer>-<vocab_size>"),
      choice(DARK_CONFIG_MEMBER(data.tokenizer), "tokenizer family"),
      text(DARK_CONFIG_MEMBER(data.tokenizer_model), false,
           "existing tokenizer model file; \"\" = train one on the corpus"),
      integer(DARK_CONFIG_MEMBER(data.vocab_size), 1, "vocabulary size of a tokenizer trained here"),
      number(DARK_CONFIG_MEMBER(data.val_fraction), open_unit_interval(),
             "share of the corpus held out for validation"),
      integer(DARK_CONFIG_MEMBER(data.seq_len), 1, "tokens per training window"),
      integer(DARK_CONFIG_MEMBER(data.val_windows), 1, "validation windows per evaluation"),

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
      integer(DARK_CONFIG_MEMBER(schedule.warmup_steps), 0, "linear warm-up steps; at most training.steps"),
      number(DARK_CONFIG_MEMBER(schedule.min_lr_ratio), unit_interval(false),
             "final learning rate as a fraction of optimizer.lr"),

      integer(DARK_CONFIG_MEMBER(training.steps), 1, "optimizer steps"),
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

      text(DARK_CONFIG_MEMBER(output.dir), false,
           "run folder (checkpoints, metrics, config.json); \"\" = runs/<config file stem>"),

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

std::string section_of(const std::string& path) {
  const std::size_t dot = path.find('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}

std::string leaf_of(const std::string& path) {
  const std::size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

bool is_section(const std::string& name) {
  for (const Field& f : schema()) {
    if (section_of(f.path) == name) return true;
  }
  return false;
}

// Top-level names in documentation order: the sections and the top-level fields.
std::vector<std::string> top_level_names() {
  std::vector<std::string> names;
  for (const Field& f : schema()) {
    const std::string section = section_of(f.path);
    const std::string name = section.empty() ? f.path : section;
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
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

// "config: PATH: unknown key (did you mean CLOSEST?)"; without a close key, the keys that
// do exist where PATH points.
[[noreturn]] void unknown_key(const std::string& path) {
  std::vector<std::string> candidates;
  if (path.find('.') == std::string::npos) {
    candidates = top_level_names();
  } else {
    for (const Field& f : schema()) candidates.push_back(f.path);
  }
  const std::string leaf = leaf_of(path);
  std::size_t best_score = std::numeric_limits<std::size_t>::max();
  std::string best;
  for (const std::string& c : candidates) {
    // A key typed into the wrong section ("optimizer.warmup_steps") is close too.
    const std::size_t score = std::min(edit_distance(path, c), edit_distance(leaf, leaf_of(c)) + 1);
    if (score < best_score) {
      best_score = score;
      best = c;
    }
  }
  if (best_score <= std::max<std::size_t>(2, leaf.size() / 3))
    fail(path, str("unknown key (did you mean ", best, "?)"));
  const std::string section = section_of(path);
  if (!section.empty() && is_section(section)) {
    std::string keys;
    for (const Field& f : schema()) {
      if (section_of(f.path) == section) keys += (keys.empty() ? "" : ", ") + leaf_of(f.path);
    }
    fail(path, str("unknown key (", section, " has: ", keys, ")"));
  }
  std::string names;
  for (const std::string& n : top_level_names()) names += (names.empty() ? "" : ", ") + n;
  fail(path, str("unknown key (top-level keys: ", names, ")"));
}

std::string dotted_to_pointer(const std::string& path) {
  std::string pointer = "/" + path;
  std::replace(pointer.begin(), pointer.end(), '.', '/');
  return pointer;
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

int auto_d_ff(int d_model) {
  // Nearest multiple of 64 to 8 d_model / 3 = 64 * round(d_model / 24), halves rounded up.
  const std::int64_t multiples = (static_cast<std::int64_t>(d_model) + 12) / 24;
  return static_cast<int>(std::max<std::int64_t>(1, multiples) * 64);
}

void resolve_config(RunConfig& config, const std::string& config_stem) {
  ModelConfig& m = config.model;
  if (m.n_kv_heads == 0) m.n_kv_heads = m.n_heads;
  if (m.d_ff == 0) m.d_ff = auto_d_ff(m.d_model);
  if (m.max_seq_len == 0) m.max_seq_len = config.data.seq_len;
  DataConfig& d = config.data;
  if (d.dir.empty()) {
    // Custom sources get a folder of their own (named by a hash of the list), so they never
    // rebuild, and so replace, a named corpus's prepared data.
    std::string name = d.corpus;
    if (!d.sources.empty()) {
      std::uint64_t h = 1469598103934665603ull;
      for (const std::string& s : d.sources)
        for (unsigned char c : s + '\n') h = (h ^ c) * 1099511628211ull;
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
      name = std::string("sources-") + hex;
    }
    d.dir = str("cache/data/", name, "-", enum_name(d.tokenizer), "-", d.vocab_size);
  }
  if (config.output.dir.empty())
    config.output.dir = "runs/" + (config_stem.empty() ? std::string("default") : config_stem);
}

void validate_config(const RunConfig& config) {
  // Per-field types and ranges: the same checks parsing applies, on the current values.
  RunConfig scratch = config;
  for (const Field& f : schema()) f.set(scratch, f.get(config), f.path);

  const ModelConfig& m = config.model;
  if (m.d_model % m.n_heads != 0) {
    fail("model.n_heads", str(m.n_heads, " does not divide model.d_model (", m.d_model, ")"));
  }
  const int head_dim = m.d_model / m.n_heads;
  if (head_dim % 2 != 0) {
    fail("model.n_heads", str("head dimension model.d_model / model.n_heads = ", m.d_model, " / ", m.n_heads,
                              " = ", head_dim, " is odd; RoPE rotates pairs of dimensions"));
  }
  const int kv_heads = m.n_kv_heads == 0 ? m.n_heads : m.n_kv_heads;
  if (m.n_heads % kv_heads != 0) {
    fail("model.n_kv_heads", str(kv_heads, " does not divide model.n_heads (", m.n_heads, ")"));
  }
  if (m.max_seq_len != 0 && m.max_seq_len < config.data.seq_len) {
    fail("model.max_seq_len", str(m.max_seq_len, " is less than data.seq_len (", config.data.seq_len, ")"));
  }
  if (config.schedule.warmup_steps > config.training.steps) {
    fail("schedule.warmup_steps",
         str(config.schedule.warmup_steps, " exceeds training.steps (", config.training.steps, ")"));
  }
  if (config.optimizer.momentum != 0.0 && config.optimizer.name != OptimizerKind::sgd) {
    fail("optimizer.momentum",
         str(number_text(config.optimizer.momentum), " is only used by optimizer.name \"sgd\" (this is \"",
             enum_name(config.optimizer.name), "\"); remove it or set 0"));
  }
}

RunConfig parse_config(const json& doc, const std::string& config_stem) {
  if (!doc.is_object()) throw Error(str("config: expected a JSON object at the top level, got ", doc.dump()));
  RunConfig config;
  for (const auto& [key, value] : doc.items()) {
    if (is_section(key)) {
      if (!value.is_object()) fail(key, str("expected an object, got ", value.dump()));
      for (const auto& [leaf, leaf_value] : value.items()) {
        const std::string path = key + "." + leaf;
        const Field* field = find_field(path);
        if (field == nullptr) unknown_key(path);
        field->set(config, leaf_value, path);
      }
    } else {
      const Field* field = find_field(key);
      if (field == nullptr) unknown_key(key);
      field->set(config, value, key);
    }
  }
  resolve_config(config, config_stem);
  validate_config(config);
  return config;
}

json read_config_json(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw Error(str("config: cannot read ", path.string(), ": it is a directory"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(str("config: cannot read ", path.string(), ": ", std::strerror(errno)));
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    return json::parse(buffer.str(), nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    // e.what(): "[json.exception.parse_error.101] parse error at line 3, column 8: syntax ..."
    const std::string what = e.what();
    const std::string marker = "parse error at ";
    const std::size_t at = what.find(marker);
    if (at != std::string::npos) {
      throw Error(str("config: ", path.string(), ": invalid JSON at ", what.substr(at + marker.size())));
    }
    throw Error(str("config: ", path.string(), ": invalid JSON: ", what));
  }
}

void apply_override(json& doc, const std::string& assignment) {
  const std::size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw Error(str("config: override \"", assignment, "\": expected key=value, e.g. training.steps=200"));
  }
  const std::string path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  const Field* field = find_field(path);
  if (field == nullptr) unknown_key(path);
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded() || (field->takes_text && !value.is_string())) value = text;
  if (doc.is_null()) doc = json::object();
  if (!doc.is_object()) throw Error(str("config: expected a JSON object at the top level, got ", doc.dump()));
  const std::string section = section_of(path);
  if (!section.empty() && doc.contains(section) && !doc[section].is_object()) {
    fail(section, str("expected an object, got ", doc[section].dump()));
  }
  doc[json::json_pointer(dotted_to_pointer(path))] = std::move(value);
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
