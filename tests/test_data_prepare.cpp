// prepare(): builds a data directory from small generated files, reuses it when nothing
// changed, rebuilds on a changed input or a damaged shard, and turns bad input (missing
// path, empty corpus, invalid UTF-8) into clear errors. Also SentencePiece end to end.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "core/file_io.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "test_util.h"

namespace dark::data {
namespace {

using dark::testing::expect_error;
using dark::testing::generated_text;
using dark::testing::TempDir;
using dark::testing::write_text;
namespace fs = std::filesystem;

// 30 documents, one empty and one with an SPDX line.
void write_corpus(const TempDir& tmp) {
  for (int i = 0; i < 30; ++i) write_text(tmp / ("src/doc" + std::to_string(i) + ".rst"), generated_text(40, i));
  write_text(tmp / "src/empty.rst", "");
  write_text(tmp / "src/licensed.rst", ".. SPDX-License-Identifier: GPL-2.0\nbody\n");
}

DataConfig byte_config(const TempDir& tmp) {
  DataConfig cfg;
  cfg.sources = {tmp / "src"};
  cfg.dir = tmp / "data";
  cfg.tokenizer = TokenizerKind::byte;
  cfg.val_fraction = 0.1;
  return cfg;
}

TEST(DataPrepare, ByteTokenizerBuildsShardsThatMatchTheText) {
  TempDir tmp;
  write_corpus(tmp);
  const DataConfig cfg = byte_config(tmp);
  const PreparedData data = prepare(cfg);
  EXPECT_FALSE(data.reused);
  EXPECT_TRUE(fs::exists(tmp / "data/meta.json"));
  EXPECT_FALSE(fs::exists(tmp / "data/tokenizer.model"));
  EXPECT_EQ(data.tokenizer->hash(), "byte-v1");

  // Expected token streams, recomputed here: each non-empty document's bytes (SPDX lines
  // dropped), then eos, in key order, split by the hash rule.
  const Corpus corpus = Corpus::resolve("", cfg.sources, cfg.val_fraction);
  std::vector<std::int32_t> expect_train, expect_val;
  std::int64_t val_files = 0;
  for (const auto& f : corpus.files()) {
    std::string text = read_document(f, InvalidUtf8::error);
    if (text.empty()) continue;
    EXPECT_EQ(text.find("SPDX"), std::string::npos);
    auto& out = f.split == Split::train ? expect_train : expect_val;
    for (unsigned char c : text) out.push_back(c);
    out.push_back(ByteTokenizer::kEos);
    val_files += f.split == Split::val;
  }
  ASSERT_GT(val_files, 0);
  for (const Split split : {Split::train, Split::val}) {
    const auto shard = data.open_shard(split);
    const auto& expect = split == Split::train ? expect_train : expect_val;
    std::vector<std::int32_t> got(static_cast<std::size_t>(shard->size()));
    shard->read(0, shard->size(), got.data());
    EXPECT_EQ(got, expect) << split_name(split);
  }
  EXPECT_EQ(data.train_tokens, static_cast<std::int64_t>(expect_train.size()));
  EXPECT_EQ(data.meta["tokenizer"]["vocab_size"], 258);
  EXPECT_EQ(data.meta["shards"]["train"]["empty_files"].get<int>() + data.meta["shards"]["val"]["empty_files"].get<int>(), 1);

  // The loader runs on it.
  LoaderOptions o;
  o.batch_size = 2;
  o.seq_len = 32;
  const TrainLoader loader(data.open_shard(Split::train), o);
  EXPECT_EQ(loader.batch(0).shape(), (Shape{2, 33}));
}

TEST(DataPrepare, SecondRunIsANoOpAndChangesRebuild) {
  TempDir tmp;
  write_corpus(tmp);
  DataConfig cfg = byte_config(tmp);
  prepare(cfg);
  const auto stamp = fs::last_write_time(tmp / "data/train.bin");
  const PreparedData again = prepare(cfg);
  EXPECT_TRUE(again.reused);
  EXPECT_EQ(fs::last_write_time(tmp / "data/train.bin"), stamp);

  const PreparedData opened = open_prepared(cfg.dir);
  EXPECT_EQ(opened.train_tokens, again.train_tokens);

  // A new file changes the inputs: rebuilt.
  write_text(tmp / "src/new.rst", "a new document\n");
  const PreparedData rebuilt = prepare(cfg);
  EXPECT_FALSE(rebuilt.reused);
  EXPECT_TRUE(prepare(cfg).reused);

  // A damaged shard: opening it is an error; prepare rebuilds it.
  {
    std::fstream f(tmp / "data/val.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(300);
    f.put('\x7f');
  }
  expect_error([&] { open_prepared(cfg.dir).open_shard(Split::val); }, {"val.bin", "checksum mismatch"});
  EXPECT_FALSE(prepare(cfg).reused);
  EXPECT_NO_THROW(open_prepared(cfg.dir).open_shard(Split::val));

  // A different val_fraction is a different data set.
  cfg.val_fraction = 0.2;
  EXPECT_FALSE(prepare(cfg).reused);
  // No temporary files left behind.
  for (const auto& e : fs::directory_iterator(tmp / "data"))
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST(DataPrepare, EdgeCasesAreClearErrors) {
  TempDir tmp;
  DataConfig cfg;
  cfg.dir = tmp / "data";
  cfg.tokenizer = TokenizerKind::byte;
  cfg.sources = {tmp / "missing"};
  expect_error([&] { prepare(cfg); }, {"missing", "does not exist"});

  write_text(tmp / "blank/a.txt", "");
  write_text(tmp / "blank/b.txt", ".. SPDX-License-Identifier: MIT\n");
  cfg.sources = {tmp / "blank"};
  expect_error([&] { prepare(cfg); }, {"empty", "holds no text"});
  cfg.tokenizer = TokenizerKind::sentencepiece;
  expect_error([&] { prepare(cfg); }, {"no text"});
  EXPECT_FALSE(fs::exists(tmp / "data/meta.json"));

  write_text(tmp / "bad/a.txt", "fine\n");
  write_text(tmp / "bad/b.txt", "ok\nnot \xC3\x28 ok\n");
  cfg.tokenizer = TokenizerKind::byte;
  cfg.sources = {tmp / "bad"};
  expect_error([&] { prepare(cfg); }, {"b.txt", "not valid UTF-8", "line 2"});
  cfg.invalid_utf8 = "replace";
  const PreparedData data = prepare(cfg);
  EXPECT_GT(data.train_tokens, 0);

  cfg.invalid_utf8 = "skip";
  expect_error([&] { prepare(cfg); }, {"invalid_utf8", "skip"});
  cfg.invalid_utf8 = "error";
  cfg.tokenizer = TokenizerKind::sentencepiece;
  cfg.vocab_size = 100;
  expect_error([&] { prepare(cfg); }, {"vocab_size", "100"});
  cfg.dir = "";
  expect_error([&] { prepare(cfg); }, {"dir"});
  expect_error([&] { open_prepared(tmp / "nowhere"); }, {"nowhere", "run prepare first"});
}

TEST(DataPrepare, SentencePieceEndToEnd) {
  TempDir tmp;
  for (int i = 0; i < 20; ++i) write_text(tmp / ("src/d" + std::to_string(i) + ".txt"), generated_text(150, 100 + i));
  DataConfig cfg;
  cfg.sources = {tmp / "src/*.txt"};
  cfg.dir = tmp / "data";
  cfg.vocab_size = 400;
  cfg.val_fraction = 0.1;
  const PreparedData a = prepare(cfg);
  ASSERT_TRUE(fs::exists(tmp / "data/tokenizer.model"));
  EXPECT_EQ(a.tokenizer->vocab_size(), 400);
  EXPECT_EQ(a.meta["tokenizer"]["hash"], a.tokenizer->hash());
  // The first document decodes back to its text.
  const auto shard = a.open_shard(Split::train);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(shard->size()));
  shard->read(0, shard->size(), ids.data());
  const auto eos = std::find(ids.begin(), ids.end(), a.tokenizer->eos_id());
  ASSERT_NE(eos, ids.end());
  const Corpus corpus = Corpus::resolve("", cfg.sources, cfg.val_fraction);
  EXPECT_EQ(a.tokenizer->decode(std::vector<std::int32_t>(ids.begin(), eos)),
            read_document(corpus.files(Split::train)[0], InvalidUtf8::error));
  EXPECT_TRUE(prepare(cfg).reused);

  // The same inputs in another directory give identical bytes (deterministic end to end).
  DataConfig other = cfg;
  other.dir = tmp / "data2";
  prepare(other);
  for (const char* f : {"tokenizer.model", "train.bin", "val.bin"})
    EXPECT_EQ(dark::read_file(tmp / (std::string("data/") + f)), dark::read_file(tmp / (std::string("data2/") + f))) << f;

  // An existing model is reused as is; a shard written by another tokenizer is refused.
  DataConfig reuse = cfg;
  reuse.dir = tmp / "data3";
  reuse.tokenizer_model = tmp / "data/tokenizer.model";
  const PreparedData c = prepare(reuse);
  EXPECT_EQ(c.tokenizer->hash(), a.tokenizer->hash());
  fs::copy_file(tmp / "data/train.bin", tmp / "byte.bin");
  expect_error([&] { TokenShard::open(tmp / "byte.bin", "byte-v1"); }, {"byte.bin", "tokenizer mismatch"});
}

}  // namespace
}  // namespace dark::data
