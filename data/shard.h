// Token shards: one binary file of token ids, written once (atomically) and read through
// mmap.
//
// Layout (little-endian), version 1:
//   offset   0  char[8]  magic "DRKTOKS\0"
//            8  u32      version (1)
//           12  u32      bytes per token: 2 (u16, vocab_size <= 65536) or 4 (u32)
//           16  u64      token count
//           24  u64      document count (each document ends with the end-of-document token)
//           32  u64      vocab size
//           40  u64      checksum of the token bytes (see token_checksum)
//           48  char[64] tokenizer hash, NUL-padded (Tokenizer::hash())
//          112  ...      zero
//          248  u64      FNV-1a 64 of bytes [0, 248): the header's own checksum
//          256  tokens
// A shard is valid only when the magic, version, header checksum, file size and token
// checksum all agree; every failure is a dark::Error naming the file and the problem.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/file_io.h"

namespace dark::data {

inline constexpr std::uint32_t kShardVersion = 1;
inline constexpr std::size_t kShardHeaderBytes = 256;

// Checksum of the token payload: FNV-1a-style over little-endian 64-bit words (the tail
// zero-padded), finished with the byte count. Changing any one word always changes it.
std::uint64_t token_checksum(const void* data, std::size_t bytes);

struct ShardInfo {
  std::string path;
  std::int64_t num_tokens = 0;
  std::int64_t num_documents = 0;
  std::int64_t vocab_size = 0;
  int token_bytes = 0;
  std::uint64_t checksum = 0;
  std::string tokenizer_hash;
};

// Streams tokens into a temporary file; finish() writes the header and renames it into
// place. Destroyed without finish(), it leaves nothing behind.
class ShardWriter {
 public:
  ShardWriter(const std::string& path, const std::string& tokenizer_hash, std::int64_t vocab_size);
  ~ShardWriter();
  // Appends one document's tokens (including its end-of-document token). Throws when an id
  // lies outside [0, vocab_size) or the document is empty.
  void append_document(std::span<const std::int32_t> tokens);
  ShardInfo finish();

 private:
  void flush_buffer(bool final);
  AtomicFileWriter file_;
  ShardInfo info_;
  std::vector<unsigned char> buffer_;
  std::uint64_t checksum_state_;
  std::uint64_t payload_bytes_ = 0;
  bool finished_ = false;
};

// A read-only, memory-mapped shard.
class TokenShard {
 public:
  // Opens and validates `path`. When expected_tokenizer_hash is non-empty it must equal the
  // header's. verify_checksum re-reads every token (about 10 GB/s) to check the checksum.
  static std::shared_ptr<const TokenShard> open(const std::string& path,
                                                const std::string& expected_tokenizer_hash = "",
                                                bool verify_checksum = true);
  ~TokenShard();
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  const ShardInfo& info() const { return info_; }
  std::int64_t size() const { return info_.num_tokens; }
  const std::string& path() const { return info_.path; }
  std::int32_t at(std::int64_t index) const;
  // Copies tokens [start, start + count) as int32 into out.
  void read(std::int64_t start, std::int64_t count, std::int32_t* out) const;

 private:
  TokenShard() = default;
  ShardInfo info_;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;
};

}  // namespace dark::data
