// bos at window starts (data.bos, data/prepare.h BosRule): the loaders' window rule on a
// hand-worked shard, prepare()'s shards and records, and the released models' tokenizers
// against Hugging Face transformers' own add_special_tokens=True ids
// (tests/reference/bos_hf.json, made by tests/reference/make_bos_reference.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/text_data.h"
#include "test_util.h"

namespace dark::data {
namespace {

using dark::testing::expect_error;
using dark::testing::TempDir;
using dark::testing::write_text;
namespace fs = std::filesystem;
using Ids = std::vector<std::int32_t>;

constexpr std::int32_t kBos = 9, kEos = 8;

// Three documents, each bos ... eos: 17 tokens, 4 windows of seq_len 4.
//   position  0 1 2 3 4 | 5 6 7 8 | 9 10 11 12 13 14 15 16
//   token     9 1 2 3 8 | 9 4 5 8 | 9  6  7  1  2  3  4  8
std::shared_ptr<const TokenShard> hand_shard(const TempDir& tmp) {
  const std::string path = tmp / "hand.bin";
  ShardWriter w(path, "hand-v1", 10);
  w.append_document(Ids{kBos, 1, 2, 3, kEos});
  w.append_document(Ids{kBos, 4, 5, kEos});
  w.append_document(Ids{kBos, 6, 7, 1, 2, 3, 4, kEos});
  w.finish();
  return TokenShard::open(path, "hand-v1");
}

Ids row(const Tensor& batch, std::int64_t r) {
  const std::int64_t cols = batch.shape()[1];
  const std::int32_t* p = batch.data<std::int32_t>() + r * cols;
  return Ids(p, p + cols);
}

TEST(DataBos, WindowsStartWithBosByTheHandWorkedRule) {
  TempDir tmp;
  const auto shard = hand_shard(tmp);
  // Window i starts at 4 i. Window 0 starts with bos and is read as it lies; the others start
  // mid-stream and get bos, then their first 4 tokens.
  const std::vector<Ids> with_bos = {{9, 1, 2, 3, 8}, {9, 8, 9, 4, 5}, {9, 8, 9, 6, 7}, {9, 1, 2, 3, 4}};
  const std::vector<Ids> as_cut = {{9, 1, 2, 3, 8}, {8, 9, 4, 5, 8}, {8, 9, 6, 7, 1}, {1, 2, 3, 4, 8}};
  const ValidationSet val(shard, 4, 4, 0, Device::cpu(), kBos), plain(shard, 4, 4);
  ASSERT_EQ(val.num_windows(), 4);
  const Tensor b = val.batch(0), p = plain.batch(0);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(row(b, i), with_bos[i]) << "window " << i;
    EXPECT_EQ(row(p, i), as_cut[i]) << "window " << i;
  }
  // The train loader cuts the same windows, in its permuted order.
  LoaderOptions o;
  o.batch_size = 1;
  o.seq_len = 4;
  o.seed = 3;
  o.bos_id = kBos;
  const TrainLoader loader(shard, o);
  for (std::int64_t i = 0; i < 8; ++i) EXPECT_EQ(row(loader.batch(i), 0), with_bos[loader.window_indices(i)[0]]);
}

TEST(DataBos, EveryTokenButWindowStartingBosIsATargetOnALongShard) {
  TempDir tmp;
  const std::string path = tmp / "long.bin";
  ShardWriter w(path, "long-v1", 100);
  std::vector<std::int32_t> stream;
  for (int d = 0; d < 40; ++d) {
    Ids doc = {kBos};
    for (int t = 0; t < 3 + (d * 7) % 23; ++t) doc.push_back(10 + (d * 31 + t * 17) % 90);
    doc.push_back(kEos);
    stream.insert(stream.end(), doc.begin(), doc.end());
    w.append_document(doc);
  }
  w.finish();
  const auto shard = TokenShard::open(path, "long-v1");
  const std::int64_t seq_len = 16;
  const ValidationSet val(shard, 1000, seq_len, 0, Device::cpu(), kBos);
  const Tensor b = val.batch(0);
  // Which stream positions are targets, recovered by matching each window's targets against
  // the stream at its start (shifted windows) or one past it (windows read as they lie).
  std::vector<int> targeted(stream.size(), 0);
  for (std::int64_t i = 0; i < val.num_windows(); ++i) {
    const Ids r = row(b, i);
    ASSERT_EQ(r[0], kBos);
    const std::int64_t start = i * seq_len;
    const std::int64_t first_target = stream[start] == kBos ? start + 1 : start;
    for (std::int64_t t = 0; t < seq_len; ++t) {
      ASSERT_EQ(r[t + 1], stream[first_target + t]) << "window " << i;
      ++targeted[first_target + t];
    }
  }
  const std::int64_t covered = val.num_windows() * seq_len;
  for (std::int64_t pos = 1; pos < covered; ++pos)
    if (!(pos % seq_len == 0 && stream[pos] == kBos)) EXPECT_GE(targeted[pos], 1) << "position " << pos;
}

void write_corpus(const TempDir& tmp, const std::vector<std::string>& docs) {
  for (std::size_t i = 0; i < docs.size(); ++i) write_text(tmp / ("src/doc" + std::to_string(i) + ".txt"), docs[i]);
}

// The expected shard of a split: per non-empty document in key order, `ids_of(document)`
// and eos.
std::vector<std::int32_t> expected_shard(const DataConfig& cfg, Split split,
                                         const std::function<Ids(const std::string&)>& ids_of, std::int32_t eos) {
  std::vector<std::int32_t> out;
  for (const CorpusFile& f : Corpus::resolve("", cfg.sources, cfg.val_fraction).files(split)) {
    const std::string text = read_document(f, InvalidUtf8::error);
    if (text.empty()) continue;
    const Ids ids = ids_of(text);
    out.insert(out.end(), ids.begin(), ids.end());
    out.push_back(eos);
  }
  return out;
}

Ids shard_tokens(const PreparedData& data, Split split) {
  const auto shard = data.open_shard(split);
  Ids got(static_cast<std::size_t>(shard->size()));
  shard->read(0, shard->size(), got.data());
  return got;
}

TEST(DataBos, PrepareRecordsTheRuleAndRebuildsWhenItChanges) {
  TempDir tmp;
  write_corpus(tmp, {"first document\n", "second\n", "third one, longer than the others\n", "4\n"});
  DataConfig cfg;
  cfg.sources = {tmp / "src"};
  cfg.dir = tmp / "data";
  cfg.tokenizer = TokenizerKind::byte;
  cfg.val_fraction = 0.3;
  cfg.bos = BosRule::always;
  const auto bytes_with_bos = [](const std::string& text) {
    Ids ids = {ByteTokenizer::kBos};
    for (const unsigned char c : text) ids.push_back(c);
    return ids;
  };
  const PreparedData on = prepare(cfg);
  EXPECT_FALSE(on.reused);
  EXPECT_EQ(on.window_bos_id, ByteTokenizer::kBos);
  EXPECT_EQ(on.meta["inputs"]["bos"], true);
  for (const Split split : {Split::train, Split::val})
    EXPECT_EQ(shard_tokens(on, split), expected_shard(cfg, split, bytes_with_bos, ByteTokenizer::kEos));
  EXPECT_TRUE(prepare(cfg).reused);
  EXPECT_EQ(open_prepared(cfg.dir).window_bos_id, ByteTokenizer::kBos);

  // Off ("never", and "auto" for the byte tokenizer): rebuilt without bos; the two agree.
  cfg.bos = BosRule::never;
  const PreparedData off = prepare(cfg);
  EXPECT_FALSE(off.reused);
  EXPECT_EQ(off.window_bos_id, -1);
  EXPECT_FALSE(off.meta["inputs"].contains("bos"));
  const auto bytes = [](const std::string& text) { return Ids(text.begin(), text.end()); };
  EXPECT_EQ(shard_tokens(off, Split::train), expected_shard(cfg, Split::train, bytes, ByteTokenizer::kEos));
  cfg.bos = BosRule::automatic;
  EXPECT_FALSE(bos_at_window_start(cfg));
  EXPECT_TRUE(prepare(cfg).reused);
}

TEST(DataBos, TextDataAndPromptsFollowTheRule) {
  TempDir tmp;
  write_text(tmp / "t.txt", "hi there");
  const auto tok = std::make_shared<ByteTokenizer>();
  const TextData with = text_as_data(tmp / "t.txt", tok, true), without = text_as_data(tmp / "t.txt", tok, false);
  EXPECT_EQ(with.data.window_bos_id, ByteTokenizer::kBos);
  EXPECT_EQ(without.data.window_bos_id, -1);
  const Ids text = {'h', 'i', ' ', 't', 'h', 'e', 'r', 'e'};
  Ids expect = {ByteTokenizer::kBos};
  expect.insert(expect.end(), text.begin(), text.end());
  expect.push_back(ByteTokenizer::kEos);
  EXPECT_EQ(shard_tokens(with.data, Split::val), expect);
  EXPECT_EQ(shard_tokens(without.data, Split::val), Ids(expect.begin() + 1, expect.end()));
  EXPECT_EQ(encode_prompt(*tok, "hi", true), (Ids{ByteTokenizer::kBos, 'h', 'i'}));
  EXPECT_EQ(encode_prompt(*tok, "hi", false), (Ids{'h', 'i'}));
  EXPECT_EQ(encode_prompt(*tok, "", true), (Ids{ByteTokenizer::kBos}));
  EXPECT_EQ(encode_prompt(*tok, "", false), (Ids{ByteTokenizer::kEos}));
}

// ---- the released models against transformers ----

fs::path models_dir() { return fs::path(DARK_TEST_DATA_DIR).parent_path().parent_path() / "cache/models"; }

const nlohmann::json& hf_reference() {
  static const nlohmann::json j = nlohmann::json::parse(read_file((fs::path(DARK_TEST_DATA_DIR) / "bos_hf.json").string()));
  return j;
}

class ReleasedTokenizer : public ::testing::TestWithParam<std::string> {
 protected:
  fs::path model_path() const {
    const nlohmann::json& m = hf_reference()["models"][GetParam()];
    return models_dir() / GetParam() / m["file"].get<std::string>();
  }
};

TEST_P(ReleasedTokenizer, AutoBosGivesTransformersIdsInPromptsAndShards) {
  const fs::path path = model_path();
  if (!fs::exists(path)) GTEST_SKIP() << "no " << path << " (scripts/fetch-models.sh all fetches it)";
  const nlohmann::json& ref = hf_reference()["models"][GetParam()];
  const std::vector<std::string> texts = hf_reference()["texts"].get<std::vector<std::string>>();
  const std::vector<Ids> want = ref["ids"].get<std::vector<Ids>>();
  ASSERT_EQ(texts.size(), want.size());

  DataConfig cfg;
  cfg.tokenizer = TokenizerKind::gguf;
  cfg.tokenizer_model = path.string();
  const bool bos = bos_at_window_start(cfg);
  EXPECT_EQ(bos, GetParam() == "gemma3");  // Gemma 3's GGUF says add_bos_token true, SmolLM2's false
  const auto tok = load_tokenizer(cfg.tokenizer, cfg.tokenizer_model);
  EXPECT_EQ(tok->bos_id(), ref["bos_id"].get<std::int32_t>());
  EXPECT_EQ(tok->eos_id(), ref["eos_id"].get<std::int32_t>());
  for (std::size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(encode_prompt(*tok, texts[i], bos), want[i]) << texts[i];

  // The prepared shards hold transformers' ids of each document, then eos; the first window
  // of the train split is the first seq_len + 1 of them.
  TempDir tmp;
  write_corpus(tmp, std::vector<std::string>(texts.begin(), texts.end() - 1));  // the documents
  cfg.sources = {tmp / "src"};
  cfg.dir = tmp / "data";
  cfg.val_fraction = 0.3;
  const PreparedData data = prepare(cfg);
  EXPECT_EQ(data.window_bos_id, bos ? tok->bos_id() : -1);
  const auto hf_ids = [&](const std::string& doc) {
    for (std::size_t i = 0; i < texts.size(); ++i)
      if (texts[i] == doc) return want[i];
    ADD_FAILURE() << "no reference ids for " << doc;
    return Ids{};
  };
  const Ids train = expected_shard(cfg, Split::train, hf_ids, tok->eos_id());
  EXPECT_EQ(shard_tokens(data, Split::train), train);
  EXPECT_EQ(shard_tokens(data, Split::val), expected_shard(cfg, Split::val, hf_ids, tok->eos_id()));
  const std::int64_t seq_len = 8;
  const ValidationSet windows(data.open_shard(Split::train), 1, seq_len, 1, Device::cpu(), data.window_bos_id);
  EXPECT_EQ(row(windows.batch(0), 0), Ids(train.begin(), train.begin() + seq_len + 1));

  // The rule can be forced either way.
  cfg.bos = bos ? BosRule::never : BosRule::always;
  EXPECT_NE(bos_at_window_start(cfg), bos);
}

INSTANTIATE_TEST_SUITE_P(Models, ReleasedTokenizer, ::testing::Values("gemma3", "smollm2"));

TEST(DataBos, AutoReadsAddBosTokenBesideAHuggingFaceTokenizer) {
  TempDir tmp;
  const fs::path src = fs::path(DARK_TEST_DATA_DIR) / "hf_llama_tiny";
  fs::create_directories(tmp / "hf");
  fs::copy_file(src / "tokenizer.json", tmp / "hf/tokenizer.json");
  nlohmann::json config = nlohmann::json::parse(read_file((src / "tokenizer_config.json").string()));
  DataConfig cfg;
  cfg.tokenizer = TokenizerKind::hf;
  cfg.tokenizer_model = tmp / "hf/tokenizer.json";
  for (const bool on : {false, true}) {
    config["add_bos_token"] = on;
    write_text(tmp / "hf/tokenizer_config.json", config.dump());
    EXPECT_EQ(bos_at_window_start(cfg), on);
  }
  // A tokenizer without a bos token cannot start windows with one: an error before anything
  // is built.
  config.erase("bos_token");
  config["add_bos_token"] = false;
  write_text(tmp / "hf/tokenizer_config.json", config.dump());
  cfg.bos = BosRule::always;
  expect_error([&] { bos_at_window_start(cfg); }, {"has no bos token"});
}

}  // namespace
}  // namespace dark::data
