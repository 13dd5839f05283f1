// libFuzzer target: the token shard reader (data/shard.h). The first input byte chooses
// what the harness repairs before opening the rest (in a memfd) with TokenShard::open: bit 0
// rewrites the header checksum and bit 1 the token checksum, so that inputs get past them
// to the size and count checks. A shard that opens must hold exactly num_tokens tokens of
// token_bytes each, all readable, and reject reads outside them. (Token ids are not
// checked against vocab_size: the writer does that, and the checksum guards the bytes.)
#include <cstdint>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/hash.h"
#include "data/shard.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  if ((mode & 2) && bytes.size() >= dark::data::kShardHeaderBytes) {
    const std::uint64_t sum = dark::data::token_checksum(bytes.data() + dark::data::kShardHeaderBytes,
                                                         bytes.size() - dark::data::kShardHeaderBytes);
    std::memcpy(bytes.data() + 40, &sum, 8);
  }
  if ((mode & 1) && bytes.size() >= dark::data::kShardHeaderBytes) {
    const std::uint64_t sum = dark::fnv1a64(std::string_view(bytes.data(), 248));
    std::memcpy(bytes.data() + 248, &sum, 8);
  }
  const dark::fuzz::MemFile file(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  std::shared_ptr<const dark::data::TokenShard> shard;
  try {
    shard = dark::data::TokenShard::open(file.path(), "", (mode & 4) == 0);
  } catch (const dark::Error&) {
    return 0;
  }
  const auto& info = shard->info();
  DARK_FUZZ_ASSERT(info.num_tokens >= 0 && info.num_documents >= 0 && info.vocab_size >= 0);
  DARK_FUZZ_ASSERT(info.token_bytes == 2 || info.token_bytes == 4);
  DARK_FUZZ_ASSERT(dark::data::kShardHeaderBytes + static_cast<std::uint64_t>(info.num_tokens) * info.token_bytes ==
                   bytes.size());
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(info.num_tokens));
  shard->read(0, info.num_tokens, tokens.data());
  for (const std::int64_t bad : {std::int64_t{-1}, info.num_tokens}) {
    bool threw = false;
    try {
      (void)shard->at(bad);
    } catch (const dark::Error&) {
      threw = true;
    }
    DARK_FUZZ_ASSERT(threw);
  }
  return 0;
}
