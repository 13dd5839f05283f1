// prepare(): corpus -> tokenizer -> train.bin / val.bin -> meta.json, reused when the
// inputs match. See prepare.h.
#include "data/prepare.h"

#include <chrono>
#include <exception>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "core/cpu/parallel.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "core/file_io.h"
#include "data/documents.h"
#include "data/hash.h"
#include "data/sentencepiece_tokenizer.h"

namespace dark::data {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kMetaFile = "meta.json";
constexpr const char* kTokenizerFile = "tokenizer.model";
constexpr std::size_t kFilesPerChunk = 64;

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string shard_file(Split split) { return split == Split::train ? "train.bin" : "val.bin"; }

void validate(const DataConfig& cfg) {
  DARK_CHECK(!cfg.dir.empty(), "data: dir (the output data directory) is required");
  DARK_CHECK(cfg.tokenizer_model.empty() || cfg.tokenizer != TokenizerKind::byte,
             "data: tokenizer_model is not used with tokenizer = \"byte\"");
  DARK_CHECK(!cfg.tokenizer_model.empty() || cfg.tokenizer != TokenizerKind::gguf,
             "data: tokenizer = \"gguf\" needs tokenizer_model, the .gguf file whose vocabulary it reads");
  DARK_CHECK(!cfg.tokenizer_model.empty() || cfg.tokenizer != TokenizerKind::hf,
             "data: tokenizer = \"hf\" needs tokenizer_model, the tokenizer.json of a Hugging Face folder");
  if (cfg.tokenizer == TokenizerKind::sentencepiece && cfg.tokenizer_model.empty())
    DARK_CHECK(cfg.vocab_size > 259 && cfg.vocab_size <= (1 << 24), "data: vocab_size must be in [260, 16777216], got ",
               cfg.vocab_size);
  DARK_CHECK(cfg.tokenizer_max_lines > 0, "data: tokenizer_max_lines must be positive, got ", cfg.tokenizer_max_lines);
  DARK_CHECK(cfg.character_coverage > 0.0 && cfg.character_coverage <= 1.0,
             "data: character_coverage must be in (0, 1], got ", cfg.character_coverage);
  DARK_CHECK(cfg.num_threads >= 1, "data: num_threads must be >= 1, got ", cfg.num_threads);
  parse_invalid_utf8(cfg.invalid_utf8);
}

// Everything that determines the directory's contents; reuse requires equality. "bos" is
// there only when on, so folders prepared before the rule existed (all without bos) stay
// valid for the tokenizers that want none.
json inputs_of(const DataConfig& cfg, const Corpus& corpus, bool bos) {
  json in = {
      {"format_version", kDataFormatVersion},
      {"corpus", corpus.description()},
      {"corpus_fingerprint", corpus.fingerprint()},
      {"files", corpus.files().size()},
      {"val_fraction", cfg.val_fraction},
      {"invalid_utf8", cfg.invalid_utf8},
      {"tokenizer", std::string(enum_name(cfg.tokenizer))},
  };
  if (cfg.tokenizer != TokenizerKind::byte) {
    if (!cfg.tokenizer_model.empty()) {
      in["tokenizer_model_hash"] = hex64(fnv1a64(read_file(cfg.tokenizer_model)));
    } else {
      in["vocab_size"] = cfg.vocab_size;
      in["character_coverage"] = cfg.character_coverage;
      in["tokenizer_max_lines"] = cfg.tokenizer_max_lines;
      in["seed"] = cfg.seed;
    }
  }
  if (bos) in["bos"] = true;
  return in;
}

// add_bos_token of the tokenizer_config.json beside a SentencePiece .model (a Hugging Face
// folder's, or an export's), false when there is none.
bool sentencepiece_folder_adds_bos(const std::string& model_path) {
  const fs::path config = fs::path(model_path).parent_path() / "tokenizer_config.json";
  if (!fs::is_regular_file(config)) return false;
  try {
    const json doc = json::parse(read_file(config.string()), json_depth_limit());
    return doc.is_object() && doc.contains("add_bos_token") && doc["add_bos_token"].is_boolean() &&
           doc["add_bos_token"].get<bool>();
  } catch (const std::exception& e) {
    throw Error(str("data: ", config.string(), " (beside tokenizer_model) is malformed: ", e.what()));
  }
}

std::shared_ptr<const Tokenizer> load_dir_tokenizer(const std::string& dir, const json& meta) {
  const std::string kind = meta.at("tokenizer").at("kind").get<std::string>();
  // A GGUF tokenizer stays in its model file (tens of MB of weights around it), a Hugging
  // Face one in its folder (tokenizer.json and the special tokens beside it); meta.json
  // records where, and the hash check below catches a file that changed.
  const std::string model = kind == "byte"                   ? ""
                            : kind == "gguf" || kind == "hf" ? meta.at("tokenizer").at("source_model").get<std::string>()
                                                             : (fs::path(dir) / kTokenizerFile).string();
  std::shared_ptr<const Tokenizer> tok = load_tokenizer(kind, model);
  const std::string recorded = meta.at("tokenizer").at("hash").get<std::string>();
  DARK_CHECK(tok->hash() == recorded, "data: ", dir, ": tokenizer ", model.empty() ? kind : model, " has hash ",
             tok->hash(), " but meta.json records ", recorded, "; re-run prepare");
  return tok;
}

PreparedData open_dir(const std::string& dir) {
  const std::string meta_path = (fs::path(dir) / kMetaFile).string();
  DARK_CHECK(fs::exists(meta_path), "data: ", dir, " is not a prepared data directory (no ", kMetaFile,
             "); run prepare first");
  PreparedData data;
  data.dir = dir;
  try {
    try {
      data.meta = json::parse(read_file(meta_path), json_depth_limit());
    } catch (const Error& e) {  // nested too deep
      throw Error(str("data: ", meta_path, " is malformed: ", e.what()));
    }
    DARK_CHECK(data.meta.at("format_version").get<int>() == kDataFormatVersion, "data: ", meta_path,
               ": format_version ", data.meta.at("format_version"), ", this build reads ", kDataFormatVersion);
    data.tokenizer = load_dir_tokenizer(dir, data.meta);
    data.train_tokens = data.meta.at("shards").at("train").at("tokens").get<std::int64_t>();
    if (data.meta.at("inputs").value("bos", false)) {
      data.window_bos_id = data.tokenizer->bos_id();
      DARK_CHECK(data.window_bos_id >= 0, "data: ", meta_path, " records bos at window starts, but tokenizer ",
                 data.tokenizer->hash(), " has no bos token");
    }
    data.val_tokens = data.meta.at("shards").at("val").at("tokens").get<std::int64_t>();
  } catch (const json::exception& e) {
    throw Error(str("data: ", meta_path, " is malformed: ", e.what()));
  }
  data.train_path = (fs::path(dir) / shard_file(Split::train)).string();
  data.val_path = (fs::path(dir) / shard_file(Split::val)).string();
  return data;
}

// Why an existing directory cannot be reused, or "" when it can.
std::string reuse_problem(const std::string& dir, const json& inputs) {
  const std::string meta_path = (fs::path(dir) / kMetaFile).string();
  if (!fs::exists(meta_path)) return "no meta.json";
  try {
    const PreparedData data = open_dir(dir);
    if (data.meta.at("inputs") != inputs) return "its inputs differ (corpus files, tokenizer or options changed)";
    for (const Split split : {Split::train, Split::val}) {
      const auto shard = data.open_shard(split);
      const auto recorded = data.meta.at("shards").at(split_name(split)).at("tokens").get<std::int64_t>();
      if (shard->size() != recorded) return str(shard->path(), " has ", shard->size(), " tokens, meta.json says ", recorded);
    }
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Reads the train split and trains SentencePiece on a sample of its lines.
std::shared_ptr<SentencePieceTokenizer> train_tokenizer(const DataConfig& cfg, const Corpus& corpus,
                                                        InvalidUtf8 policy, json& record) {
  const auto t0 = Clock::now();
  LineSampler sampler(cfg.tokenizer_max_lines, cfg.seed);
  std::uint64_t bytes = 0;
  for (const auto& f : corpus.files(Split::train)) {
    const std::string text = read_document(f, policy);
    bytes += text.size();
    sampler.add_text(text);
  }
  DARK_CHECK(!sampler.lines().empty(), "data: corpus '", corpus.description(),
             "' has no text in its train split (every train file is empty)");
  spdlog::info("data: training SentencePiece BPE (vocab {}) on {} of {} lines ({:.1f} MB of train text)...",
               cfg.vocab_size, sampler.lines().size(), sampler.lines_seen(), bytes / 1e6);
  SentencePieceOptions opt;
  opt.vocab_size = cfg.vocab_size;
  opt.character_coverage = cfg.character_coverage;
  opt.seed = cfg.seed;
  auto tok = SentencePieceTokenizer::train(sampler.lines(), opt);
  const double secs = seconds_since(t0);
  spdlog::info("data: tokenizer trained in {:.1f} s ({})", secs, tok->hash());
  record["trained_on_lines"] = sampler.lines().size();
  record["train_lines_seen"] = sampler.lines_seen();
  record["training_seconds"] = secs;
  return tok;
}

struct SplitResult {
  ShardInfo info;
  std::int64_t files = 0, empty_files = 0;
  std::uint64_t bytes = 0;
};

// Tokenizes one split's files (in parallel, appended in file order) into its shard.
SplitResult write_split(const DataConfig& cfg, const Corpus& corpus, Split split, const Tokenizer& tok,
                        InvalidUtf8 policy, bool bos) {
  const std::vector<CorpusFile> files = corpus.files(split);
  const std::string path = (fs::path(cfg.dir) / shard_file(split)).string();
  ShardWriter writer(path, tok.hash(), tok.vocab_size());
  SplitResult result;
  result.files = static_cast<std::int64_t>(files.size());
  const auto t0 = Clock::now();
  auto last_report = t0;
  std::int64_t written = 0;
  for (std::size_t begin = 0; begin < files.size(); begin += kFilesPerChunk) {
    const std::size_t n = std::min(kFilesPerChunk, files.size() - begin);
    std::vector<std::vector<std::int32_t>> tokens(n);
    std::vector<std::uint64_t> bytes(n);
    // The error of the first failing file (in file order) is rethrown after the region.
    cpu::RegionErrors errors;
#pragma omp parallel for schedule(dynamic, 1) num_threads(cfg.num_threads)
    for (std::size_t i = 0; i < n; ++i) {
      errors.run(static_cast<std::int64_t>(i), [&] {
        const std::string text = read_document(files[begin + i], policy);
        bytes[i] = text.size();
        if (!text.empty()) {
          if (bos) tokens[i].push_back(tok.bos_id());
          const std::vector<std::int32_t> ids = tok.encode(text);
          tokens[i].insert(tokens[i].end(), ids.begin(), ids.end());
          tokens[i].push_back(tok.eos_id());
        }
      });
    }
    errors.rethrow();
    for (std::size_t i = 0; i < n; ++i) {
      result.bytes += bytes[i];
      if (tokens[i].empty()) {
        ++result.empty_files;
        continue;
      }
      writer.append_document(tokens[i]);
      written += static_cast<std::int64_t>(tokens[i].size());
    }
    if (seconds_since(last_report) > 2.0 && begin + n < files.size()) {
      last_report = Clock::now();
      spdlog::info("data: {}: {}/{} files, {:.2f} M tokens, {:.1f} s", split_name(split), begin + n, files.size(),
                   written / 1e6, seconds_since(t0));
    }
  }
  result.info = writer.finish();
  const double secs = seconds_since(t0);
  spdlog::info("data: wrote {}: {} files ({} empty), {:.2f} MB of text -> {} tokens ({:.2f} bytes/token) in {:.1f} s",
               path, result.files, result.empty_files, result.bytes / 1e6, result.info.num_tokens,
               result.info.num_tokens ? static_cast<double>(result.bytes) / result.info.num_tokens : 0.0, secs);
  return result;
}

// Each split's document length distribution, read from its shard (checked when it was
// written or verified for reuse) and logged; the json for meta.json.
json log_length_distributions(const std::string& dir, const std::string& tokenizer_hash) {
  json out = json::object();
  for (const Split split : {Split::train, Split::val}) {
    const auto shard = TokenShard::open((fs::path(dir) / shard_file(split)).string(), tokenizer_hash,
                                        /*verify_checksum=*/false);
    const LengthDistribution d = length_distribution(find_documents(*shard).lengths());
    spdlog::info("data: {} split: {}", split_name(split), describe(d));
    out[split_name(split)] = to_json(d);
  }
  return out;
}

}  // namespace

std::shared_ptr<const TokenShard> PreparedData::open_shard(Split split) const {
  DARK_CHECK(tokenizer != nullptr, "data: open_shard on an unprepared directory");
  return TokenShard::open(split == Split::train ? train_path : val_path, tokenizer->hash());
}

PreparedData open_prepared(const std::string& dir) { return open_dir(dir); }

bool bos_at_window_start(const DataConfig& cfg) {
  if (cfg.bos == BosRule::never) return false;
  // A given GGUF or Hugging Face tokenizer is checked here, before prepare() touches the
  // folder; the byte tokenizer and SentencePiece models (trained here or given) have bos.
  const bool model_file = cfg.tokenizer == TokenizerKind::gguf || cfg.tokenizer == TokenizerKind::hf;
  const std::unique_ptr<Tokenizer> tok = model_file ? load_tokenizer(cfg.tokenizer, cfg.tokenizer_model) : nullptr;
  bool on = cfg.bos == BosRule::always;
  if (cfg.bos == BosRule::automatic) {
    if (tok) on = tok->add_bos();
    else if (cfg.tokenizer == TokenizerKind::sentencepiece && !cfg.tokenizer_model.empty())
      on = sentencepiece_folder_adds_bos(cfg.tokenizer_model);
  }
  DARK_CHECK(!on || !tok || tok->bos_id() >= 0, "data.bos \"", enum_name(cfg.bos), "\": bos at window starts, but the "
             "tokenizer of ", cfg.tokenizer_model, " has no bos token");
  return on;
}

namespace {
// Step 1 of prepare: the byte tokenizer, one read from a GGUF or Hugging Face model, a given
// SentencePiece model (copied into the folder) or one trained on the corpus; what it was
// built from goes into `tok_record` (meta.json "tokenizer").
std::shared_ptr<const Tokenizer> build_tokenizer(const DataConfig& cfg, const Corpus& corpus, InvalidUtf8 policy,
                                                 json& tok_record);
// Step 3: meta.json, which marks the folder complete.
json meta_json(const DataConfig& cfg, const json& inputs, const Tokenizer& tok, json tok_record,
               const SplitResult& train, const SplitResult& val, const json& lengths, double tokenize_secs,
               double total_secs);
}  // namespace

PreparedData prepare(const DataConfig& cfg) {
  validate(cfg);
  const InvalidUtf8 policy = parse_invalid_utf8(cfg.invalid_utf8);
  const auto t_start = Clock::now();
  const Corpus corpus = Corpus::resolve(cfg.corpus, cfg.sources, cfg.val_fraction);
  const auto train_files = corpus.files(Split::train).size(), val_files = corpus.files(Split::val).size();
  spdlog::info("data: corpus '{}': {} files ({} train, {} val), {:.1f} MB", corpus.description(),
               corpus.files().size(), train_files, val_files, corpus.total_bytes() / 1e6);
  const bool bos = bos_at_window_start(cfg);
  const json inputs = inputs_of(cfg, corpus, bos);

  std::error_code ec;
  fs::create_directories(cfg.dir, ec);
  DARK_CHECK(!ec, "data: cannot create directory ", cfg.dir, ": ", ec.message());
  const std::string problem = reuse_problem(cfg.dir, inputs);
  if (problem.empty()) {
    PreparedData data = open_dir(cfg.dir);
    data.reused = true;
    spdlog::info("data: {} is up to date ({} train, {} val tokens); nothing to do", cfg.dir, data.train_tokens,
                 data.val_tokens);
    log_length_distributions(cfg.dir, data.tokenizer->hash());
    return data;
  }
  spdlog::info("data: building {} ({})", cfg.dir, problem);
  // meta.json marks a complete directory: remove it before touching anything else.
  fs::remove(fs::path(cfg.dir) / kMetaFile, ec);

  // 1. tokenizer
  json tok_record = json::object();
  const std::shared_ptr<const Tokenizer> tok = build_tokenizer(cfg, corpus, policy, tok_record);
  DARK_CHECK(!bos || tok->bos_id() >= 0, "data.bos: bos at window starts asked for, but tokenizer ", tok->hash(),
             " has no bos token");
  if (bos)
    spdlog::info("data: bos ({} '{}') starts every document and every window (data.bos \"{}\")", tok->bos_id(),
                 tok->piece(tok->bos_id()), enum_name(cfg.bos));

  // 2. shards
  const auto t_tokenize = Clock::now();
  const SplitResult train = write_split(cfg, corpus, Split::train, *tok, policy, bos);
  DARK_CHECK(train.info.num_tokens > 0, "data: corpus '", corpus.description(), "' is empty: its train split (",
             train.files, " file(s)) holds no text");
  const SplitResult val = write_split(cfg, corpus, Split::val, *tok, policy, bos);
  const double tokenize_secs = seconds_since(t_tokenize);
  const json lengths = log_length_distributions(cfg.dir, tok->hash());

  // 3. meta.json, last
  const json meta = meta_json(cfg, inputs, *tok, std::move(tok_record), train, val, lengths, tokenize_secs,
                              seconds_since(t_start));
  write_file_atomic((fs::path(cfg.dir) / kMetaFile).string(), meta.dump(2) + "\n");
  spdlog::info("data: {} ready: {} train tokens, {} val tokens, vocab {} ({:.1f} s)", cfg.dir, train.info.num_tokens,
               val.info.num_tokens, tok->vocab_size(), seconds_since(t_start));
  return open_dir(cfg.dir);
}

namespace {

std::shared_ptr<const Tokenizer> build_tokenizer(const DataConfig& cfg, const Corpus& corpus, InvalidUtf8 policy,
                                                 json& tok_record) {
  std::error_code ec;
  std::shared_ptr<const Tokenizer> tok;
  const std::string model_path = (fs::path(cfg.dir) / kTokenizerFile).string();
  if (cfg.tokenizer == TokenizerKind::byte) {
    tok = std::make_shared<ByteTokenizer>();
    fs::remove(model_path, ec);
  } else if (cfg.tokenizer == TokenizerKind::gguf || cfg.tokenizer == TokenizerKind::hf) {
    tok = load_tokenizer(cfg.tokenizer, cfg.tokenizer_model);
    fs::remove(model_path, ec);
    tok_record["source_model"] = fs::absolute(cfg.tokenizer_model).lexically_normal().string();
    spdlog::info("data: using the tokenizer of {} ({}, vocab {})", cfg.tokenizer_model, tok->hash(), tok->vocab_size());
  } else if (!cfg.tokenizer_model.empty()) {
    auto sp = SentencePieceTokenizer::load(cfg.tokenizer_model);
    sp->save(model_path);
    tok_record["source_model"] = cfg.tokenizer_model;
    spdlog::info("data: using tokenizer {} ({}, vocab {})", cfg.tokenizer_model, sp->hash(), sp->vocab_size());
    tok = std::move(sp);
  } else {
    auto sp = train_tokenizer(cfg, corpus, policy, tok_record);
    sp->save(model_path);
    tok = std::move(sp);
  }
  return tok;
}

json meta_json(const DataConfig& cfg, const json& inputs, const Tokenizer& tok, json tok_record,
               const SplitResult& train, const SplitResult& val, const json& lengths, double tokenize_secs,
               double total_secs) {
  auto shard_json = [&lengths](const SplitResult& r, Split split) {
    return json{{"file", shard_file(split)},   {"tokens", r.info.num_tokens},
                {"documents", r.info.num_documents}, {"files", r.files},
                {"empty_files", r.empty_files}, {"text_bytes", r.bytes},
                {"token_bytes", r.info.token_bytes}, {"checksum", hex64(r.info.checksum)},
                {"document_lengths", lengths.at(split_name(split))}};
  };
  tok_record["kind"] = tok.kind();
  tok_record["hash"] = tok.hash();
  tok_record["vocab_size"] = tok.vocab_size();
  tok_record["eos_id"] = tok.eos_id();
  tok_record["bos_id"] = tok.bos_id();
  tok_record["file"] = tok.kind() == "sentencepiece" ? json(kTokenizerFile) : json(nullptr);
  return {
      {"format_version", kDataFormatVersion},
      {"created_by", str("darkformer ", DARK_VERSION)},
      {"inputs", inputs},
      {"sources", cfg.sources.empty() ? json::array({cfg.corpus}) : json(cfg.sources)},
      {"tokenizer", tok_record},
      {"shards", {{"train", shard_json(train, Split::train)}, {"val", shard_json(val, Split::val)}}},
      {"seconds", {{"tokenization", tokenize_secs}, {"total", total_secs}}},
  };
}

}  // namespace

}  // namespace dark::data
