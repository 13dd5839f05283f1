// prepare(): builds a data directory from a corpus, once. The directory holds
//   tokenizer.model   the SentencePiece model (absent for the byte tokenizer)
//   train.bin         token shard of the train split (documents joined by end-of-document; each
//                     document preceded by bos when the folder's bos rule is on, see BosRule)
//   val.bin           token shard of the validation split
//   meta.json         inputs, counts, tokenizer hash and vocab size, each split's document
//                     length distribution (documents.h), timings; written last, so a directory
//                     with meta.json is complete.
// Building or reusing, prepare() logs each split's document length distribution (from the
// shards themselves, so folders prepared before it was recorded print it too).
// Calling prepare() again with the same inputs (corpus files and sizes, tokenizer options,
// val_fraction, ...) verifies the directory and returns without rebuilding; any difference,
// or a missing / corrupted file, rebuilds it (logging why).
//
// Multi-process runs: let one process call prepare(), then the others open_prepared().
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/corpus.h"
#include "data/mqar.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "data/windows.h"

namespace dark::data {

inline constexpr int kDataFormatVersion = 1;

// Whether every training and validation window starts with the tokenizer's bos token
// (data.bos). Models such as Gemma 3 and Llama were trained that way and use bos as an
// attention sink; feeding them windows without it costs nats. On: the shards put bos before
// every document, and the loaders give a window that starts mid-document bos in place of its
// first token slot (loader.h), as do eval --text, generate and probe.
//   automatic  what the tokenizer's own metadata says (Tokenizer::add_bos(): GGUF
//              tokenizer.ggml.add_bos_token, Hugging Face add_bos_token, also the
//              tokenizer_config.json beside a given SentencePiece .model); off for the byte
//              tokenizer and SentencePiece models trained here (as before this rule existed)
//   always     on (the tokenizer must have a bos token)
//   never      off
enum class BosRule { automatic, always, never };

// data.task: what a run trains on. text: windows of a tokenized corpus (everything below);
// mqar: the synthetic associative-recall task of mqar.h (no corpus, no tokenizer: ids are
// the task's own vocabulary, data.mqar).
enum class DataTask { text, mqar };

// The data section of a run config, owned here; the run config's schema binds its rows to the
// members above the line ("data.seq_len" is seq_len). The ones below it are not config keys.
struct DataConfig {
  std::string corpus = "debdocs";       // named corpus (corpus.h): "debdocs", "debdocs-python" or "longdocs"
  std::vector<std::string> sources;     // files, folders or glob patterns; override corpus when non-empty
  std::string dir;                      // output data directory (required by prepare; the run config fills it)
  TokenizerKind tokenizer = TokenizerKind::sentencepiece;
  std::string tokenizer_model;          // existing SentencePiece .model to use instead of training one;
                                        // for gguf the .gguf file, for hf a tokenizer.json (meta.json records its path)
  int vocab_size = 8192;                // SentencePiece vocabulary when training (ignored with tokenizer_model; byte: 258)
  double val_fraction = 0.02;           // share of files (by path hash) in the validation split, [0, 0.5]
  int seq_len = 256;                    // tokens per training window (the loaders'; prepare() does not read it)
  int val_windows = 64;                 // validation windows per evaluation (the loaders')
  BosRule bos = BosRule::automatic;     // bos at every window start (see BosRule)
  WindowMode windows = WindowMode::document;  // where the loaders cut windows (windows.h; prepare() does not read it)
  DataTask task = DataTask::text;       // text, or the synthetic MQAR task (prepare() does not read it)
  MqarConfig mqar;                      // data.task mqar: the task's settings (mqar.h)
  // ----
  std::string invalid_utf8 = "error";   // invalid UTF-8 in an input file: "error" or "replace" (U+FFFD)
  std::int64_t tokenizer_max_lines = 1000000;  // lines sampled from the train split to train SentencePiece
  double character_coverage = 0.9995;   // SentencePiece character coverage; rarer characters become bytes
  std::uint64_t seed = 0;               // line sampling and SentencePiece's RNG
  int num_threads = 2;                  // threads for tokenization (SentencePiece training uses 2)
};

struct PreparedData {
  std::string dir;
  bool reused = false;  // true when prepare() found a matching directory and built nothing
  nlohmann::json meta;  // the contents of meta.json
  std::shared_ptr<const Tokenizer> tokenizer;
  std::string train_path, val_path;
  std::int64_t train_tokens = 0, val_tokens = 0;
  // The bos id every window starts with, -1 when windows start where they are cut (the
  // folder's record: meta.json inputs "bos"; folders from before the rule have none: -1).
  std::int32_t window_bos_id = -1;

  // Opens a split's shard, checking it against this tokenizer's hash and its checksum.
  std::shared_ptr<const TokenShard> open_shard(Split split) const;
};

// Builds (or reuses) cfg.dir. Throws dark::Error for a bad config, a missing path, an
// empty corpus (no files, or no text in the train split), invalid UTF-8 under
// invalid_utf8 = "error", or a failed tokenizer training.
PreparedData prepare(const DataConfig& cfg);

// Opens a directory written by prepare(): reads meta.json, loads the tokenizer and checks
// it against the recorded hash. Throws naming the directory when it is incomplete.
PreparedData open_prepared(const std::string& dir);

// Whether cfg's bos rule is on for its tokenizer (loads a GGUF or Hugging Face tokenizer to
// read its metadata when the rule is automatic). Throws when the rule is on and the
// tokenizer has no bos token.
bool bos_at_window_start(const DataConfig& cfg);

}  // namespace dark::data

namespace dark {
template <>
struct EnumNames<data::DataTask> {
  static constexpr std::array<std::pair<data::DataTask, std::string_view>, 2> table{
      {{data::DataTask::text, "text"}, {data::DataTask::mqar, "mqar"}}};
};
template <>
struct EnumNames<data::BosRule> {
  static constexpr std::array<std::pair<data::BosRule, std::string_view>, 3> table{
      {{data::BosRule::automatic, "auto"}, {data::BosRule::always, "always"}, {data::BosRule::never, "never"}}};
};
}  // namespace dark
