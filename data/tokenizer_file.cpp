// Tokenizers saved as single files and rebuilt from them (see tokenizer_file.h).
#include "data/tokenizer_file.h"

#include <climits>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_depth.h"
#include "data/bpe_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/spm_tokenizer.h"

namespace dark::data {
namespace {

constexpr const char* kBpeFormat = "darkformer-bpe-tokenizer";
constexpr int kBpeFormatVersion = 1;
constexpr const char* kSpmFormat = "darkformer-spm-tokenizer";
constexpr int kSpmFormatVersion = 1;

std::string bpe_file_bytes(const BpeVocab& v) {
  const nlohmann::json j = {{"format", kBpeFormat},  {"format_version", kBpeFormatVersion},
                            {"pre", v.pre},          {"tokens", v.tokens},
                            {"token_types", v.token_types}, {"merges", v.merges},
                            {"bos_id", v.bos_id},    {"eos_id", v.eos_id},
                            {"unk_id", v.unk_id},    {"pad_id", v.pad_id},
                            {"add_bos", v.add_bos}};
  return j.dump() + "\n";
}

template <class T>
T field(const nlohmann::json& j, const char* key, const std::string& origin) {
  DARK_CHECK(j.contains(key), origin, ": \"", key, "\" is missing");
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(str(origin, ": \"", key, "\" has the wrong type (", j.at(key).type_name(), ")"));
  }
}

// An id or token type: an integer that fits int32 (a float or a huge number is an error, not
// a conversion).
std::int32_t int32_field(const nlohmann::json& value, const std::string& what, const std::string& origin) {
  const bool fits = value.is_number_integer() &&
                    (value.is_number_unsigned() ? value.get<std::uint64_t>() <= INT32_MAX
                                                : value.get<std::int64_t>() >= INT32_MIN && value.get<std::int64_t>() <= INT32_MAX);
  DARK_CHECK(fits, origin, ": ", what, " is not a 32-bit integer");
  return static_cast<std::int32_t>(value.get<std::int64_t>());
}

nlohmann::json parse_json(const std::string& bytes, const std::string& origin) {
  try {
    return nlohmann::json::parse(bytes, json_depth_limit());
  } catch (const nlohmann::json::exception& e) {
    throw Error(str(origin, ": not valid JSON: ", e.what()));
  } catch (const Error& e) {
    throw Error(str(origin, ": ", e.what()));
  }
}

// The "format" string of a parsed tokenizer file, "" when there is none.
std::string format_of(const nlohmann::json& j) {
  return j.is_object() && j.contains("format") && j["format"].is_string() ? j["format"].get<std::string>() : "";
}

void check_version(const nlohmann::json& j, int supported, const std::string& origin) {
  const nlohmann::json& version = j.contains("format_version") ? j["format_version"] : nlohmann::json();
  DARK_CHECK(version.is_number_integer() && version == supported, origin, ": format version ",
             version.dump().substr(0, 40), " is not supported (this build reads version ", supported, ")");
}

std::unique_ptr<Tokenizer> bpe_from_json(const nlohmann::json& j, const std::string& kind, const std::string& origin) {
  DARK_CHECK(format_of(j) == kBpeFormat, origin, ": not a ", kBpeFormat, " file");
  check_version(j, kBpeFormatVersion, origin);
  BpeVocab v;
  v.pre = field<std::string>(j, "pre", origin);
  v.tokens = field<std::vector<std::string>>(j, "tokens", origin);
  const auto types = field<std::vector<nlohmann::json>>(j, "token_types", origin);
  for (const nlohmann::json& t : types) v.token_types.push_back(int32_field(t, "a token type", origin));
  v.merges = field<std::vector<std::string>>(j, "merges", origin);
  v.bos_id = int32_field(field<nlohmann::json>(j, "bos_id", origin), "\"bos_id\"", origin);
  v.eos_id = int32_field(field<nlohmann::json>(j, "eos_id", origin), "\"eos_id\"", origin);
  v.unk_id = int32_field(field<nlohmann::json>(j, "unk_id", origin), "\"unk_id\"", origin);
  v.pad_id = int32_field(field<nlohmann::json>(j, "pad_id", origin), "\"pad_id\"", origin);
  v.add_bos = field<bool>(j, "add_bos", origin);
  v.kind = kind;  // where it came from (a GGUF file or a tokenizer.json), not part of the data
  try {
    return std::make_unique<BpeTokenizer>(std::move(v));
  } catch (const Error& e) {
    throw Error(str(origin, ": ", e.what()));
  }
}

std::string spm_file_bytes(const SpmVocab& v) {
  const nlohmann::json j = {{"format", kSpmFormat},  {"format_version", kSpmFormatVersion},
                            {"tokens", v.tokens},    {"scores", v.scores},
                            {"token_types", v.token_types},
                            {"bos_id", v.bos_id},    {"eos_id", v.eos_id},
                            {"unk_id", v.unk_id},    {"pad_id", v.pad_id},
                            {"add_bos", v.add_bos},  {"add_eos", v.add_eos},
                            {"add_space_prefix", v.add_space_prefix}};
  try {
    return j.dump() + "\n";
  } catch (const nlohmann::json::exception& e) {  // a token that is not valid UTF-8
    throw Error(str("tokenizer: cannot write ", kSpmFormat, ": ", e.what()));
  }
}

std::unique_ptr<Tokenizer> spm_from_json(const nlohmann::json& j, const std::string& origin) {
  check_version(j, kSpmFormatVersion, origin);
  SpmVocab v;
  v.tokens = field<std::vector<std::string>>(j, "tokens", origin);
  for (const nlohmann::json& s : field<std::vector<nlohmann::json>>(j, "scores", origin)) {
    DARK_CHECK(s.is_number(), origin, ": a score is not a number");
    const auto score = static_cast<float>(s.get<double>());
    DARK_CHECK(std::isfinite(score), origin, ": a score (", s.dump(), ") is not a finite float");
    v.scores.push_back(score);
  }
  for (const nlohmann::json& t : field<std::vector<nlohmann::json>>(j, "token_types", origin))
    v.token_types.push_back(int32_field(t, "a token type", origin));
  DARK_CHECK(v.token_types.size() == v.tokens.size(), origin, ": \"token_types\" has ", v.token_types.size(),
             " entries for ", v.tokens.size(), " tokens");
  v.bos_id = int32_field(field<nlohmann::json>(j, "bos_id", origin), "\"bos_id\"", origin);
  v.eos_id = int32_field(field<nlohmann::json>(j, "eos_id", origin), "\"eos_id\"", origin);
  v.unk_id = int32_field(field<nlohmann::json>(j, "unk_id", origin), "\"unk_id\"", origin);
  v.pad_id = int32_field(field<nlohmann::json>(j, "pad_id", origin), "\"pad_id\"", origin);
  v.add_bos = field<bool>(j, "add_bos", origin);
  v.add_eos = field<bool>(j, "add_eos", origin);
  v.add_space_prefix = field<bool>(j, "add_space_prefix", origin);
  try {
    return std::make_unique<SpmTokenizer>(std::move(v));
  } catch (const Error& e) {
    throw Error(str(origin, ": ", e.what()));
  }
}

}  // namespace

std::optional<TokenizerFile> tokenizer_file(const Tokenizer& tokenizer) {
  if (const auto* sp = dynamic_cast<const SentencePieceTokenizer*>(&tokenizer))
    return TokenizerFile{"tokenizer.model", sp->model_bytes()};
  if (const auto* bpe = dynamic_cast<const BpeTokenizer*>(&tokenizer))
    return TokenizerFile{"tokenizer.bpe.json", bpe_file_bytes(bpe->vocab())};
  if (const auto* spm = dynamic_cast<const SpmTokenizer*>(&tokenizer))
    return TokenizerFile{"tokenizer.spm.json", spm_file_bytes(spm->vocab())};
  DARK_CHECK(dynamic_cast<const ByteTokenizer*>(&tokenizer) != nullptr, "tokenizer: cannot save a ", tokenizer.kind(),
             " tokenizer to a file");
  return std::nullopt;
}

std::unique_ptr<Tokenizer> tokenizer_from_file(const std::string& kind, std::string bytes, const std::string& origin) {
  switch (parse_enum<TokenizerKind>(kind, origin + ": tokenizer kind")) {
    case TokenizerKind::byte: return std::make_unique<ByteTokenizer>();
    case TokenizerKind::sentencepiece: return SentencePieceTokenizer::from_model_bytes(std::move(bytes), origin);
    case TokenizerKind::gguf: {
      const nlohmann::json j = parse_json(bytes, origin);
      const std::string format = format_of(j);
      if (format == kSpmFormat) return spm_from_json(j, origin);
      DARK_CHECK(format == kBpeFormat, origin, ": not a ", kBpeFormat, " or ", kSpmFormat, " file");
      return bpe_from_json(j, kind, origin);
    }
    case TokenizerKind::hf: return bpe_from_json(parse_json(bytes, origin), kind, origin);
  }
  throw Error(str(origin, ": unknown tokenizer kind"));
}

}  // namespace dark::data
