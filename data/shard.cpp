// ShardWriter and TokenShard. See shard.h for the file layout.
#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "data/hash.h"

namespace dark::data {
namespace {

constexpr char kMagic[8] = {'D', 'R', 'K', 'T', 'O', 'K', 'S', '\0'};
constexpr std::size_t kHashField = 64;
constexpr std::size_t kHeaderChecksumOffset = 248;
constexpr std::size_t kBufferBytes = 1 << 20;

struct RawHeader {
  char magic[8];
  std::uint32_t version;
  std::uint32_t token_bytes;
  std::uint64_t num_tokens;
  std::uint64_t num_documents;
  std::uint64_t vocab_size;
  std::uint64_t checksum;
  char tokenizer_hash[kHashField];
  unsigned char zero[kHeaderChecksumOffset - 112];
  std::uint64_t header_checksum;
};
static_assert(sizeof(RawHeader) == kShardHeaderBytes);
static_assert(offsetof(RawHeader, tokenizer_hash) == 48);
static_assert(offsetof(RawHeader, header_checksum) == kHeaderChecksumOffset);

std::uint64_t header_checksum(const RawHeader& h) {
  return fnv1a64(std::string_view(reinterpret_cast<const char*>(&h), kHeaderChecksumOffset));
}

// Folds whole 64-bit words into the running checksum.
std::uint64_t checksum_words(std::uint64_t h, const unsigned char* data, std::size_t words) {
  for (std::size_t i = 0; i < words; ++i) {
    std::uint64_t w;
    std::memcpy(&w, data + 8 * i, 8);
    h = (h ^ w) * kFnvPrime;
  }
  return h;
}

// Folds the last partial word (zero-padded) and the byte count.
std::uint64_t checksum_finish(std::uint64_t h, const unsigned char* tail, std::size_t tail_bytes,
                              std::uint64_t total_bytes) {
  if (tail_bytes > 0) {
    std::uint64_t w = 0;
    std::memcpy(&w, tail, tail_bytes);
    h = (h ^ w) * kFnvPrime;
  }
  return (h ^ total_bytes) * kFnvPrime;
}

}  // namespace

std::uint64_t token_checksum(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  const std::size_t words = bytes / 8;
  return checksum_finish(checksum_words(kFnvOffset, p, words), p + 8 * words, bytes % 8, bytes);
}

// ---- writer ----

ShardWriter::ShardWriter(const std::string& path, const std::string& tokenizer_hash, std::int64_t vocab_size)
    : file_(path), checksum_state_(kFnvOffset) {
  DARK_CHECK(vocab_size > 0 && vocab_size <= (std::int64_t{1} << 31), "token shard ", path,
             ": vocab_size ", vocab_size, " out of range");
  DARK_CHECK(!tokenizer_hash.empty() && tokenizer_hash.size() < kHashField, "token shard ", path,
             ": tokenizer hash '", tokenizer_hash, "' must have 1..", kHashField - 1, " characters");
  info_.path = path;
  info_.vocab_size = vocab_size;
  info_.token_bytes = vocab_size <= 65536 ? 2 : 4;
  info_.tokenizer_hash = tokenizer_hash;
  const RawHeader placeholder{};  // written for real by finish()
  file_.write(&placeholder, sizeof placeholder);
  buffer_.reserve(kBufferBytes + 8);
}

ShardWriter::~ShardWriter() = default;

void ShardWriter::append_document(std::span<const std::int32_t> tokens) {
  DARK_CHECK(!finished_, "token shard ", info_.path, ": append after finish");
  DARK_CHECK(!tokens.empty(), "token shard ", info_.path,
             ": empty document (each document ends with its end-of-document token)");
  for (const std::int32_t id : tokens) {
    DARK_CHECK(id >= 0 && id < info_.vocab_size, "token shard ", info_.path, ": token id ", id,
               " outside the vocabulary [0, ", info_.vocab_size, ")");
    if (info_.token_bytes == 2) {
      const auto v = static_cast<std::uint16_t>(id);
      buffer_.insert(buffer_.end(), reinterpret_cast<const unsigned char*>(&v),
                     reinterpret_cast<const unsigned char*>(&v) + 2);
    } else {
      const auto v = static_cast<std::uint32_t>(id);
      buffer_.insert(buffer_.end(), reinterpret_cast<const unsigned char*>(&v),
                     reinterpret_cast<const unsigned char*>(&v) + 4);
    }
    if (buffer_.size() >= kBufferBytes) flush_buffer(false);
  }
  info_.num_tokens += static_cast<std::int64_t>(tokens.size());
  info_.num_documents += 1;
}

void ShardWriter::flush_buffer(bool final) {
  // Checksum whole words only, keeping a partial word at the front for the next flush.
  const std::size_t words = buffer_.size() / 8;
  checksum_state_ = checksum_words(checksum_state_, buffer_.data(), words);
  const std::size_t done = final ? buffer_.size() : words * 8;
  file_.write(buffer_.data(), done);
  payload_bytes_ += done;
  if (final) {
    checksum_state_ = checksum_finish(checksum_state_, buffer_.data() + words * 8, buffer_.size() - words * 8,
                                      payload_bytes_);
    buffer_.clear();
  } else {
    buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(done));
  }
}

ShardInfo ShardWriter::finish() {
  DARK_CHECK(!finished_, "token shard ", info_.path, ": finish twice");
  flush_buffer(true);
  info_.checksum = checksum_state_;
  RawHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kShardVersion;
  h.token_bytes = static_cast<std::uint32_t>(info_.token_bytes);
  h.num_tokens = static_cast<std::uint64_t>(info_.num_tokens);
  h.num_documents = static_cast<std::uint64_t>(info_.num_documents);
  h.vocab_size = static_cast<std::uint64_t>(info_.vocab_size);
  h.checksum = info_.checksum;
  std::memcpy(h.tokenizer_hash, info_.tokenizer_hash.data(), info_.tokenizer_hash.size());
  h.header_checksum = header_checksum(h);
  file_.write_at(&h, sizeof h, 0);
  file_.commit();
  finished_ = true;
  return info_;
}

// ---- reader ----

std::shared_ptr<const TokenShard> TokenShard::open(const std::string& path, const std::string& expected_tokenizer_hash,
                                                   bool verify_checksum) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DARK_CHECK(fd >= 0, "token shard ", path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(str("token shard ", path, ": fstat: ", std::strerror(err)));
  }
  const auto file_bytes = static_cast<std::uint64_t>(st.st_size);
  if (file_bytes < kShardHeaderBytes) {
    ::close(fd);
    throw Error(str("token shard ", path, ": truncated: ", file_bytes, " bytes, smaller than the ",
                    kShardHeaderBytes, "-byte header"));
  }
  void* map = ::mmap(nullptr, file_bytes, PROT_READ, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  DARK_CHECK(map != MAP_FAILED, "token shard ", path, ": mmap: ", std::strerror(map_errno));

  std::shared_ptr<TokenShard> shard(new TokenShard());
  shard->map_ = map;
  shard->map_bytes_ = file_bytes;
  shard->info_.path = path;
  RawHeader h;
  std::memcpy(&h, map, sizeof h);
  const std::string where = str("token shard ", path, ": ");
  DARK_CHECK(std::memcmp(h.magic, kMagic, sizeof kMagic) == 0, where,
             "bad magic (not a darkformer token shard, or its header is corrupted)");
  DARK_CHECK(h.version == kShardVersion, where, "unsupported version ", h.version, " (this build reads version ",
             kShardVersion, "); re-run prepare");
  DARK_CHECK(h.header_checksum == header_checksum(h), where, "header checksum mismatch (the header is corrupted)");
  DARK_CHECK(h.token_bytes == 2 || h.token_bytes == 4, where, "bad token size ", h.token_bytes, " bytes");
  DARK_CHECK(h.tokenizer_hash[kHashField - 1] == '\0', where, "tokenizer hash field is not terminated");
  // The counts become int64 and the token bytes a product: a crafted count must neither
  // wrap the product around to the file's size nor turn negative.
  std::uint64_t expected_bytes = 0;
  DARK_CHECK(h.num_tokens <= static_cast<std::uint64_t>(INT64_MAX) &&
                 !__builtin_mul_overflow(h.num_tokens, std::uint64_t{h.token_bytes}, &expected_bytes) &&
                 !__builtin_add_overflow(expected_bytes, kShardHeaderBytes, &expected_bytes),
             where, "header says ", h.num_tokens, " tokens, more than any file can hold (the header is corrupted)");
  DARK_CHECK(file_bytes >= expected_bytes, where, "truncated: header says ", h.num_tokens, " tokens (",
             expected_bytes, " bytes) but the file has ", file_bytes, " bytes");
  DARK_CHECK(h.num_documents <= h.num_tokens, where, "header says ", h.num_documents, " documents in ",
             h.num_tokens, " tokens (each document ends with its end-of-document token)");
  DARK_CHECK(h.vocab_size > 0 && h.vocab_size <= (std::uint64_t{1} << 31), where, "vocab_size ", h.vocab_size,
             " out of range [1, 2^31]");
  DARK_CHECK(file_bytes == expected_bytes, where, "size mismatch: header says ", h.num_tokens, " tokens (",
             expected_bytes, " bytes) but the file has ", file_bytes, " bytes");

  ShardInfo& info = shard->info_;
  info.num_tokens = static_cast<std::int64_t>(h.num_tokens);
  info.num_documents = static_cast<std::int64_t>(h.num_documents);
  info.vocab_size = static_cast<std::int64_t>(h.vocab_size);
  info.token_bytes = static_cast<int>(h.token_bytes);
  info.checksum = h.checksum;
  info.tokenizer_hash = std::string(h.tokenizer_hash);
  shard->tokens_ = static_cast<const unsigned char*>(map) + kShardHeaderBytes;

  if (!expected_tokenizer_hash.empty())
    DARK_CHECK(info.tokenizer_hash == expected_tokenizer_hash, where, "tokenizer mismatch: the shard was written by '",
               info.tokenizer_hash, "' but the tokenizer in use is '", expected_tokenizer_hash,
               "'; re-run prepare for this tokenizer");
  if (verify_checksum) {
    const std::uint64_t actual = token_checksum(shard->tokens_, h.num_tokens * h.token_bytes);
    DARK_CHECK(actual == h.checksum, where, "checksum mismatch (the token data is corrupted): header ",
               hex64(h.checksum), ", data ", hex64(actual));
  }
  ::madvise(map, file_bytes, MADV_RANDOM);
  return shard;
}

TokenShard::~TokenShard() {
  if (map_) ::munmap(map_, map_bytes_);
}

std::int32_t TokenShard::at(std::int64_t index) const {
  DARK_CHECK(index >= 0 && index < info_.num_tokens, "token shard ", info_.path, ": index ", index,
             " outside [0, ", info_.num_tokens, ")");
  std::int32_t v;
  read(index, 1, &v);
  return v;
}

void TokenShard::read(std::int64_t start, std::int64_t count, std::int32_t* out) const {
  DARK_CHECK(start >= 0 && count >= 0 && start + count <= info_.num_tokens, "token shard ", info_.path,
             ": read of [", start, ", ", start + count, ") outside [0, ", info_.num_tokens, ")");
  if (info_.token_bytes == 2) {
    const unsigned char* p = tokens_ + 2 * start;
    for (std::int64_t i = 0; i < count; ++i) {
      std::uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[i] = v;
    }
  } else {
    const unsigned char* p = tokens_ + 4 * start;
    for (std::int64_t i = 0; i < count; ++i) {
      std::uint32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      out[i] = static_cast<std::int32_t>(v);
    }
  }
}

}  // namespace dark::data
