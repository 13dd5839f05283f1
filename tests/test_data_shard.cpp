// Token shards: write / mmap read in both token widths, the checksum, and a clear error
// for every kind of damage (bad magic, truncation, corrupted tokens or header, tokenizer
// mismatch); atomic writing leaves nothing behind when a writer is abandoned.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <cstring>
#include <functional>
#include <string_view>

#include "core/error.h"
#include "data/hash.h"
#include "data/shard.h"
#include "test_util.h"

namespace dark::data {
namespace {

using dark::testing::expect_error;
using dark::testing::TempDir;

ShardInfo write_shard(const std::string& path, const std::vector<std::vector<std::int32_t>>& docs,
                      std::int64_t vocab, const std::string& hash = "test-tok") {
  ShardWriter w(path, hash, vocab);
  for (const auto& d : docs) w.append_document(d);
  return w.finish();
}

void patch(const std::string& path, std::uint64_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(DataShard, ChecksumIsWordFnvWithLength) {
  // Independent recomputation of the documented rule on 11 bytes (one word + a 3-byte tail).
  const unsigned char data[11] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  std::uint64_t h = kFnvOffset;
  h = (h ^ 0x0807060504030201ull) * kFnvPrime;
  h = (h ^ 0x0b0a09ull) * kFnvPrime;
  h = (h ^ 11ull) * kFnvPrime;
  EXPECT_EQ(token_checksum(data, 11), h);
  EXPECT_NE(token_checksum(data, 10), token_checksum(data, 11));
}

TEST(DataShard, WritesAndReadsBothWidths) {
  TempDir tmp;
  for (const std::int64_t vocab : {std::int64_t{258}, std::int64_t{65536}, std::int64_t{65537}, std::int64_t{1} << 20}) {
    const std::string path = tmp / ("s" + std::to_string(vocab) + ".bin");
    std::vector<std::vector<std::int32_t>> docs(3);
    std::vector<std::int32_t> all;
    for (int i = 0; i < 300001; ++i) {  // crosses the writer's 1 MiB buffer; odd length
      const auto id = static_cast<std::int32_t>((i * 7919ll) % vocab);
      docs[i % 3 == 0 ? 0 : (i < 200000 ? 1 : 2)].push_back(id);
    }
    for (const auto& d : docs) all.insert(all.end(), d.begin(), d.end());
    const ShardInfo written = write_shard(path, docs, vocab);
    EXPECT_EQ(written.token_bytes, vocab <= 65536 ? 2 : 4);
    EXPECT_EQ(std::filesystem::file_size(path), kShardHeaderBytes + all.size() * written.token_bytes);
    const auto shard = TokenShard::open(path, "test-tok");
    EXPECT_EQ(shard->size(), static_cast<std::int64_t>(all.size()));
    EXPECT_EQ(shard->info().num_documents, 3);
    EXPECT_EQ(shard->info().vocab_size, vocab);
    EXPECT_EQ(shard->info().tokenizer_hash, "test-tok");
    EXPECT_EQ(shard->info().checksum, written.checksum);
    std::vector<std::int32_t> back(all.size());
    shard->read(0, shard->size(), back.data());
    EXPECT_EQ(back, all);
    EXPECT_EQ(shard->at(12345), all[12345]);
    EXPECT_THROW(shard->at(shard->size()), Error);
    EXPECT_THROW(shard->read(shard->size() - 1, 2, back.data()), Error);
  }
}

TEST(DataShard, EmptyShardIsValid) {
  TempDir tmp;
  write_shard(tmp / "e.bin", {}, 300);
  const auto shard = TokenShard::open(tmp / "e.bin");
  EXPECT_EQ(shard->size(), 0);
}

TEST(DataShard, OutOfVocabularyIdIsRejected) {
  TempDir tmp;
  ShardWriter w(tmp / "x.bin", "h", 100);
  expect_error([&] { w.append_document(std::vector<std::int32_t>{1, 100}); }, {"x.bin", "100", "[0, 100)"});
}

TEST(DataShard, AbandonedWriterLeavesNothing) {
  TempDir tmp;
  {
    ShardWriter w(tmp / "a.bin", "h", 100);
    w.append_document(std::vector<std::int32_t>{1, 2, 3});
  }
  EXPECT_TRUE(std::filesystem::is_empty(tmp.path()));
}

TEST(DataShard, CorruptionIsDetectedAndNamed) {
  TempDir tmp;
  const std::string good = tmp / "good.bin";
  std::vector<std::int32_t> doc(1000);
  for (int i = 0; i < 1000; ++i) doc[i] = i % 300;
  write_shard(good, {doc}, 300);
  auto fresh = [&](const std::string& name) {
    const std::string p = tmp / name;
    std::filesystem::copy_file(good, p, std::filesystem::copy_options::overwrite_existing);
    return p;
  };

  const std::string magic = fresh("magic.bin");
  patch(magic, 0, "NOTASHRD");
  expect_error([&] { TokenShard::open(magic); }, {"magic.bin", "bad magic"});

  const std::string flipped = fresh("flipped.bin");
  patch(flipped, kShardHeaderBytes + 777, "\x55");
  expect_error([&] { TokenShard::open(flipped); }, {"flipped.bin", "checksum mismatch"});
  EXPECT_NO_THROW(TokenShard::open(flipped, "", /*verify_checksum=*/false));

  const std::string header = fresh("header.bin");
  patch(header, 16, std::string("\x10\x00", 2));  // token count changed
  expect_error([&] { TokenShard::open(header); }, {"header.bin", "header checksum mismatch"});

  const std::string cut = fresh("cut.bin");
  std::filesystem::resize_file(cut, kShardHeaderBytes + 1000);
  expect_error([&] { TokenShard::open(cut); }, {"cut.bin", "truncated", "1000 tokens", "1256 bytes"});

  const std::string truncated = fresh("truncated.bin");
  std::filesystem::resize_file(truncated, 100);
  expect_error([&] { TokenShard::open(truncated); }, {"truncated.bin", "truncated", "100 bytes"});

  const std::string longer = fresh("long.bin");
  std::filesystem::resize_file(longer, kShardHeaderBytes + 2002);
  expect_error([&] { TokenShard::open(longer); }, {"long.bin", "size mismatch"});

  expect_error([&] { TokenShard::open(tmp / "missing.bin"); }, {"missing.bin", "cannot open"});
  expect_error([&] { TokenShard::open(good, "sentencepiece-0123456789abcdef"); },
               {"good.bin", "tokenizer mismatch", "test-tok", "sentencepiece-0123456789abcdef"});
}

// Overwrites the u64 at `offset` and refreshes the header checksum, as a crafted (not a
// damaged) file would.
void patch_header_u64(const std::string& path, std::uint64_t offset, std::uint64_t value) {
  std::string header(kShardHeaderBytes, '\0');
  {
    std::ifstream in(path, std::ios::binary);
    in.read(header.data(), static_cast<std::streamsize>(header.size()));
  }
  std::memcpy(header.data() + offset, &value, 8);
  const std::uint64_t sum = fnv1a64(std::string_view(header.data(), 248));
  std::memcpy(header.data() + 248, &sum, 8);
  patch(path, 0, header);
}

// Found by tests/fuzz/fuzz_shard: header counts that only a crafted header holds, with a
// valid header checksum. A token count whose byte size wraps around 2^64 to the file's
// size used to be accepted (and became a negative size()), as did counts above INT64_MAX.
TEST(DataShard, CraftedHeaderCountsAreRejected) {
  TempDir tmp;
  const std::string good = tmp / "good.bin";
  write_shard(good, {{1, 2, 3}, {4}}, 300);  // 4 two-byte tokens: 8 payload bytes
  auto crafted = [&](const std::string& name, std::uint64_t offset, std::uint64_t value) {
    const std::string p = tmp / name;
    std::filesystem::copy_file(good, p, std::filesystem::copy_options::overwrite_existing);
    patch_header_u64(p, offset, value);
    return p;
  };
  // 2^63 + 4 tokens of 2 bytes: 2^64 + 8 bytes, which wraps to the real 8.
  const std::string wrapped = crafted("wrapped.bin", 16, (std::uint64_t{1} << 63) + 4);
  expect_error([&] { TokenShard::open(wrapped, "", false); }, {"wrapped.bin", "9223372036854775812 tokens"});
  const std::string documents = crafted("documents.bin", 24, 0xffffffff00000002ull);
  expect_error([&] { TokenShard::open(documents); }, {"documents.bin", "18446744069414584322 documents in 4 tokens"});
  const std::string vocab = crafted("vocab.bin", 32, std::uint64_t{1} << 40);
  expect_error([&] { TokenShard::open(vocab); }, {"vocab.bin", "vocab_size 1099511627776 out of range"});
  const std::string zero_vocab = crafted("zero_vocab.bin", 32, 0);
  expect_error([&] { TokenShard::open(zero_vocab); }, {"zero_vocab.bin", "vocab_size 0 out of range"});
  EXPECT_EQ(TokenShard::open(good)->info().num_documents, 2);
}

TEST(DataShard, EmptyDocumentIsRejected) {
  TempDir tmp;
  ShardWriter w(tmp / "x.bin", "h", 100);
  expect_error([&] { w.append_document(std::vector<std::int32_t>{}); }, {"x.bin", "empty document"});
}

}  // namespace
}  // namespace dark::data
