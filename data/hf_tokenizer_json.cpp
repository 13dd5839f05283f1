// tokenizer.json writer and reader for byte-level BPE (see hf_tokenizer_json.h).
#include "data/hf_tokenizer_json.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/file_io.h"

namespace dark::data {
namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;
using nlohmann::json;

namespace {

ordered_json byte_level(bool with_regex_flags) {
  ordered_json b = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}};
  if (with_regex_flags) b["use_regex"] = true;
  return b;
}

ordered_json pre_tokenizer_for(const std::string& pre) {
  if (pre == "gpt2") return byte_level(true);
  DARK_CHECK(pre == "smollm", "tokenizer.json: pre-tokenizer \"", pre, "\" has no Hugging Face equivalent here");
  return {{"type", "Sequence"},
          {"pretokenizers", ordered_json::array({{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)})}};
}

[[noreturn]] void fail(const std::string& origin, const std::string& key, const std::string& message) {
  throw Error(str("tokenizer.json: ", origin, ": ", key, ": ", message));
}

// A string member of a JSON object: absent and null read as "".
std::string optional_string(const json& object, const char* key, const std::string& origin, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return "";
  if (!it->is_string()) fail(origin, where + "." + key, "expected a string or null, got " + it->dump());
  return it->get<std::string>();
}

bool optional_bool(const json& object, const char* key, bool fallback, const std::string& origin,
                   const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail(origin, where + "." + key, "expected true or false, got " + it->dump());
  return it->get<bool>();
}

// ByteLevel as our regex pre-tokenizer: no prefix space, the GPT-2 regex on.
void check_byte_level(const json& b, const std::string& origin, const std::string& where) {
  if (optional_bool(b, "add_prefix_space", true, origin, where))  // the tokenizers default is true
    fail(origin, where + ".add_prefix_space", "true is not supported (our byte-level BPE adds no prefix space)");
  if (!optional_bool(b, "use_regex", true, origin, where))
    fail(origin, where + ".use_regex", "false is not supported (the GPT-2 regex is how our pre-tokenizer splits)");
}

std::string parse_pre_tokenizer(const json& pt, const std::string& origin) {
  const std::string supported = "supported: ByteLevel (pre \"gpt2\") or Sequence[Digits(individual_digits), ByteLevel] "
                                "(pre \"smollm\")";
  if (!pt.is_object()) fail(origin, "pre_tokenizer", str(pt.dump().substr(0, 80), " is not supported; ", supported));
  const std::string type = optional_string(pt, "type", origin, "pre_tokenizer");
  if (type == "ByteLevel") {
    check_byte_level(pt, origin, "pre_tokenizer");
    return "gpt2";
  }
  if (type == "Sequence") {
    const auto it = pt.find("pretokenizers");
    if (it == pt.end() || !it->is_array()) fail(origin, "pre_tokenizer.pretokenizers", "missing or not a list");
    const json& seq = *it;
    auto type_of = [&](std::size_t i) { return seq[i].is_object() ? seq[i].value("type", std::string()) : std::string(); };
    if (seq.size() == 1 && type_of(0) == "ByteLevel") {
      check_byte_level(seq[0], origin, "pre_tokenizer.pretokenizers[0]");
      return "gpt2";
    }
    if (seq.size() == 2 && type_of(0) == "Digits" && type_of(1) == "ByteLevel") {
      if (!optional_bool(seq[0], "individual_digits", false, origin, "pre_tokenizer.pretokenizers[0]"))
        fail(origin, "pre_tokenizer.pretokenizers[0].individual_digits",
             "false (runs of digits kept together) is not supported; " + supported);
      check_byte_level(seq[1], origin, "pre_tokenizer.pretokenizers[1]");
      return "smollm";
    }
    std::string types;
    for (std::size_t i = 0; i < seq.size(); ++i) types += (i ? ", " : "") + type_of(i);
    fail(origin, "pre_tokenizer", str("Sequence[", types, "] is not supported; ", supported));
  }
  fail(origin, "pre_tokenizer.type", str("\"", type, "\" is not supported; ", supported));
}

void check_model(const json& model, const std::string& origin) {
  if (!model.is_object()) fail(origin, "model", "missing or not an object");
  const std::string type = optional_string(model, "type", origin, "model");
  // Files written before tokenizers 0.13 may omit "type"; a vocab with merges is BPE.
  if (!(type == "BPE" || (type.empty() && model.contains("merges"))))
    fail(origin, "model.type", str("\"", type, "\" is not supported; only byte-level \"BPE\" is"));
  if (optional_bool(model, "byte_fallback", false, origin, "model"))
    fail(origin, "model.byte_fallback", "true (SentencePiece-style BPE) is not supported; only byte-level BPE is");
  if (optional_bool(model, "ignore_merges", false, origin, "model"))
    fail(origin, "model.ignore_merges", "true (whole words looked up before merging) is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!optional_string(model, key, origin, "model").empty())
      fail(origin, str("model.", key), str(model.at(key).dump(), " is not supported"));
  const auto dropout = model.find("dropout");
  if (dropout != model.end() && !dropout->is_null() && !(dropout->is_number() && dropout->get<double>() == 0.0))
    fail(origin, "model.dropout", str(dropout->dump(), " is not supported (encoding must be deterministic)"));
}

std::vector<std::string> parse_merges(const json& merges, const std::string& origin) {
  if (!merges.is_array()) fail(origin, "model.merges", "missing or not a list");
  std::vector<std::string> out;
  out.reserve(merges.size());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {
      out.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      const std::string a = m[0].get<std::string>(), b = m[1].get<std::string>();
      if (a.find(' ') != std::string::npos || b.find(' ') != std::string::npos)
        fail(origin, str("model.merges[", i, "]"), str(m.dump(), ": a piece holding a space is not supported"));
      out.push_back(a + " " + b);
    } else {
      fail(origin, str("model.merges[", i, "]"), str(m.dump().substr(0, 80), " is neither \"a b\" nor [\"a\", \"b\"]"));
    }
  }
  return out;
}

// The content of a special-token entry of tokenizer_config.json / special_tokens_map.json.
std::optional<std::string> token_content(const json& entry) {
  if (entry.is_string()) return entry.get<std::string>();
  if (entry.is_object() && entry.contains("content") && entry["content"].is_string())
    return entry["content"].get<std::string>();
  return std::nullopt;
}

std::optional<json> read_json_beside(const fs::path& dir, const char* name) {
  const fs::path path = dir / name;
  if (!fs::exists(path)) return std::nullopt;
  try {
    return json::parse(read_file(path), json_depth_limit());
  } catch (const json::exception& e) {
    throw Error(str("tokenizer: ", path.string(), " is not valid JSON: ", e.what()));
  } catch (const Error& e) {
    throw Error(str("tokenizer: ", path.string(), ": ", e.what()));
  }
}

}  // namespace

namespace tokenizer_json {

ordered_json vocab(const std::vector<std::string>& tokens) {
  ordered_json pieces = ordered_json::object();
  // Appended in id order past ordered_map's own insert, which searches the keys linearly
  // (quadratic for a 50k vocabulary); `seen` keeps them unique.
  auto& entries = static_cast<ordered_json::object_t::Container&>(pieces.get_ref<ordered_json::object_t&>());
  entries.reserve(tokens.size());
  std::unordered_map<std::string_view, std::size_t> seen;
  seen.reserve(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    const auto [it, fresh] = seen.emplace(t, i);
    DARK_CHECK(fresh, "tokenizer.json: token '", t, "' is both id ", it->second, " and id ", i,
               "; tokenizer.json's vocabulary maps each text to one id");
    entries.emplace_back(t, i);
  }
  return pieces;
}

ordered_json added_token(std::size_t id, const std::string& content, bool special) {
  return {{"id", id},         {"content", content},    {"single_word", false}, {"lstrip", false},
          {"rstrip", false},  {"normalized", false}, {"special", special}};
}

ordered_json bos_post_processor(const std::string& bos, std::int32_t bos_id) {
  auto special = [&](int type_id) { return ordered_json{{"SpecialToken", {{"id", bos}, {"type_id", type_id}}}}; };
  auto sequence = [](const char* name, int type_id) {
    return ordered_json{{"Sequence", {{"id", name}, {"type_id", type_id}}}};
  };
  return {{"type", "TemplateProcessing"},
          {"single", ordered_json::array({special(0), sequence("A", 0)})},
          {"pair", ordered_json::array({special(0), sequence("A", 0), special(1), sequence("B", 1)})},
          {"special_tokens", {{bos, {{"id", bos}, {"ids", ordered_json::array({bos_id})},
                                     {"tokens", ordered_json::array({bos})}}}}}};
}

std::string dump(const ordered_json& doc) {
  try {
    return doc.dump(1) + "\n";
  } catch (const nlohmann::json::type_error& e) {
    throw Error(str("tokenizer.json: a token or merge is not valid UTF-8 (", e.what(), ")"));
  }
}

}  // namespace tokenizer_json

std::string hf_tokenizer_json(const BpeVocab& vocab, bool bos_first) {
  const std::size_t n = vocab.tokens.size();
  DARK_CHECK(vocab.token_types.empty() || vocab.token_types.size() == n, "tokenizer.json: ", vocab.token_types.size(),
             " token types for ", n, " tokens");
  DARK_CHECK(!bos_first || (vocab.bos_id >= 0 && static_cast<std::size_t>(vocab.bos_id) < n),
             "tokenizer.json: bos first was asked for but the vocabulary has no bos token (bos id ", vocab.bos_id, ")");
  auto type_of = [&](std::size_t i) {
    return vocab.token_types.empty() ? BpeTokenType::normal : static_cast<BpeTokenType>(vocab.token_types[i]);
  };
  ordered_json added = ordered_json::array();
  for (std::size_t i = 0; i < n; ++i) {
    const BpeTokenType type = type_of(i);
    if (type == BpeTokenType::control || type == BpeTokenType::user_defined)
      added.push_back(tokenizer_json::added_token(i, vocab.tokens[i], type == BpeTokenType::control));
  }
  ordered_json merges = ordered_json::array();
  for (const std::string& m : vocab.merges) merges.push_back(m);
  const ordered_json post_processor =
      bos_first ? tokenizer_json::bos_post_processor(vocab.tokens[vocab.bos_id], vocab.bos_id) : ordered_json();
  const ordered_json doc = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre_tokenizer_for(vocab.pre)},
      {"post_processor", post_processor},
      {"decoder", byte_level(true)},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", tokenizer_json::vocab(vocab.tokens)},
        {"merges", merges}}}};
  return tokenizer_json::dump(doc);
}

BpeVocab parse_hf_tokenizer_json(std::string_view text, const std::string& origin) {
  json doc;
  try {
    doc = json::parse(text, json_depth_limit());
  } catch (const json::exception& e) {
    throw Error(str("tokenizer.json: ", origin, " is not valid JSON: ", e.what()));
  } catch (const Error& e) {
    throw Error(str("tokenizer.json: ", origin, ": ", e.what()));
  }
  if (!doc.is_object()) fail(origin, "(top level)", "not a JSON object");
  const json& model = doc.contains("model") ? doc["model"] : json();
  check_model(model, origin);
  if (doc.contains("normalizer") && !doc["normalizer"].is_null())
    fail(origin, "normalizer", str(doc["normalizer"].dump().substr(0, 80), " is not supported (only null)"));
  if (!doc.contains("pre_tokenizer")) fail(origin, "pre_tokenizer", "missing");
  BpeVocab v;
  v.kind = "hf";
  v.pre = parse_pre_tokenizer(doc["pre_tokenizer"], origin);
  const json decoder = doc.value("decoder", json());
  if (!decoder.is_object() || decoder.value("type", std::string()) != "ByteLevel")
    fail(origin, "decoder", str(decoder.dump().substr(0, 80), " is not supported (only ByteLevel)"));

  // Ids: model.vocab and added_tokens together must number 0 .. n-1 with one text each.
  const auto vocab_it = model.find("vocab");
  if (vocab_it == model.end() || !vocab_it->is_object()) fail(origin, "model.vocab", "missing or not an object");
  std::vector<std::optional<std::string>> tokens;
  auto place = [&](std::int64_t id, const std::string& t, const std::string& where) {
    if (id < 0 || id >= INT32_MAX) fail(origin, where, str("id ", id, " is out of range"));
    if (static_cast<std::size_t>(id) >= tokens.size()) tokens.resize(static_cast<std::size_t>(id) + 1);
    auto& slot = tokens[static_cast<std::size_t>(id)];
    if (slot && *slot != t) fail(origin, where, str("id ", id, " is both '", *slot, "' and '", t, "'"));
    slot = t;
  };
  for (const auto& [t, id] : vocab_it->items()) {
    if (!id.is_number_integer()) fail(origin, "model.vocab", str("'", t, "': id ", id.dump(), " is not an integer"));
    place(id.get<std::int64_t>(), t, "model.vocab");
  }
  std::vector<std::pair<std::int64_t, bool>> specials;  // (id, special)
  const json added = doc.value("added_tokens", json::array());
  if (!added.is_array()) fail(origin, "added_tokens", "not a list");
  for (std::size_t i = 0; i < added.size(); ++i) {
    const json& a = added[i];
    const std::string where = str("added_tokens[", i, "]");
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
        !a["content"].is_string())
      fail(origin, where, "needs an integer \"id\" and a string \"content\"");
    for (const char* flag : {"lstrip", "rstrip", "single_word"})
      if (optional_bool(a, flag, false, origin, where))
        fail(origin, str(where, ".", flag), str("true is not supported ('", a["content"].get<std::string>(),
                                                 "' is matched literally)"));
    place(a["id"].get<std::int64_t>(), a["content"].get<std::string>(), where);
    specials.emplace_back(a["id"].get<std::int64_t>(), optional_bool(a, "special", false, origin, where));
  }
  v.tokens.reserve(tokens.size());
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    if (!tokens[id]) fail(origin, "model.vocab", str("no token has id ", id, " (ids must run 0 .. ", tokens.size() - 1, ")"));
    v.tokens.push_back(std::move(*tokens[id]));
  }
  v.token_types.assign(v.tokens.size(), static_cast<std::int32_t>(BpeTokenType::normal));
  for (const auto& [id, special] : specials)
    v.token_types[static_cast<std::size_t>(id)] =
        static_cast<std::int32_t>(special ? BpeTokenType::control : BpeTokenType::user_defined);
  v.merges = parse_merges(model.value("merges", json()), origin);
  const std::string unk = optional_string(model, "unk_token", origin, "model");
  if (!unk.empty()) {
    const auto it = vocab_it->find(unk);
    if (it == vocab_it->end()) fail(origin, "model.unk_token", str("'", unk, "' is not in model.vocab"));
    v.unk_id = it->get<std::int32_t>();
  }
  return v;
}

std::unique_ptr<BpeTokenizer> load_hf_tokenizer(const std::string& tokenizer_json_path) {
  DARK_CHECK(!tokenizer_json_path.empty(), "tokenizer \"hf\": no tokenizer.json path given");
  DARK_CHECK(fs::is_regular_file(tokenizer_json_path), "tokenizer \"hf\": ", tokenizer_json_path, " is not a file");
  BpeVocab v = parse_hf_tokenizer_json(read_file(tokenizer_json_path), tokenizer_json_path);
  const bool model_has_unk = v.unk_id >= 0;  // only then does Hugging Face emit unk
  const fs::path dir = fs::path(tokenizer_json_path).parent_path();
  std::unordered_map<std::string, std::int32_t> ids;
  for (std::size_t i = 0; i < v.tokens.size(); ++i) ids.emplace(v.tokens[i], static_cast<std::int32_t>(i));

  struct Special {
    const char* name;  // "eos": eos_token / eos_token_id
    std::int32_t* id;
    bool found = false;
  };
  std::vector<Special> wanted = {{"bos", &v.bos_id}, {"eos", &v.eos_id}, {"unk", &v.unk_id}, {"pad", &v.pad_id}};
  for (const char* file : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const std::optional<json> doc = read_json_beside(dir, file);
    if (!doc || !doc->is_object()) continue;
    for (Special& s : wanted) {
      const std::string key = str(s.name, "_token");
      if (s.found || !doc->contains(key) || (*doc)[key].is_null()) continue;
      const std::optional<std::string> content = token_content((*doc)[key]);
      DARK_CHECK(content, "tokenizer: ", (dir / file).string(), ": ", key, " is ", (*doc)[key].dump(),
                 ", expected a token text or {\"content\": ...}");
      const auto it = ids.find(*content);
      DARK_CHECK(it != ids.end(), "tokenizer: ", (dir / file).string(), ": ", key, " '", *content, "' is not in ",
                 tokenizer_json_path);
      *s.id = it->second;
      s.found = true;
    }
    if (std::string(file) == "tokenizer_config.json" && doc->contains("add_bos_token") &&
        (*doc)["add_bos_token"].is_boolean())
      v.add_bos = (*doc)["add_bos_token"].get<bool>();
  }
  for (const char* file : {"config.json", "generation_config.json"}) {
    const std::optional<json> doc = read_json_beside(dir, file);
    if (!doc || !doc->is_object()) continue;
    for (Special& s : wanted) {
      const std::string key = str(s.name, "_token_id");
      if (s.found || !doc->contains(key) || (*doc)[key].is_null()) continue;
      // generation_config's pad id is what fills finished rows (often eos), not a pad token.
      if (std::string(file) == "generation_config.json" && std::string(s.name) == "pad") continue;
      json id = (*doc)[key];
      if (id.is_array() && !id.empty()) id = id[0];  // several stop tokens: the first is the end of document
      DARK_CHECK(id.is_number_integer(), "tokenizer: ", (dir / file).string(), ": ", key, " is ", (*doc)[key].dump(),
                 ", expected a token id");
      *s.id = id.get<std::int32_t>();
      s.found = true;
    }
  }
  DARK_CHECK(wanted[1].found, "tokenizer: ", dir.string(), " names no end-of-sequence token (eos_token in "
             "tokenizer_config.json or special_tokens_map.json, or eos_token_id in config.json); it separates documents");
  auto tok = std::make_unique<BpeTokenizer>(std::move(v));
  DARK_CHECK(!model_has_unk || tok->missing_bytes().empty(), "tokenizer.json: ", tokenizer_json_path,
             ": model.unk_token is set and ", tok->missing_bytes().size(),
             " byte(s) have no piece: Hugging Face would encode them as unk, our byte-level BPE drops them");
  return tok;
}

BpeVocab byte_tokenizer_vocab() {
  BpeVocab v;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(BpeTokenizer::byte_encode(std::string(1, static_cast<char>(b))));
  v.tokens.push_back("<eos>");
  v.tokens.push_back("<bos>");
  v.token_types.assign(256, static_cast<std::int32_t>(BpeTokenType::normal));
  v.token_types.push_back(static_cast<std::int32_t>(BpeTokenType::control));
  v.token_types.push_back(static_cast<std::int32_t>(BpeTokenType::control));
  v.eos_id = 256;
  v.bos_id = 257;
  v.pre = "gpt2";
  return v;
}

}  // namespace dark::data
