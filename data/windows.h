// Where the loaders' windows lie in a token shard (data.windows).
//
// A window is seq_len + 1 consecutive tokens: the inputs and, shifted by one, their targets.
//   packed    the shard as one stream, documents end to end: window w starts at token
//             w * seq_len, so windows cross document boundaries; (num_tokens - 1) / seq_len of
//             them. Today's short-context runs were trained this way (before data.windows).
//   document  every window lies inside one document (documents.h: the spans ending with the
//             end-of-document token, bos first when the folder puts bos before documents):
//             within each document, windows at stride seq_len from its first token, (length -
//             1) / seq_len of them; a tail shorter than a window, and a document shorter than
//             one window, give none. Windows are numbered document by document, in shard order.
// In both, consecutive windows of a stream share one token, so every token inside a window
// but a stream's first is a target exactly once.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/enum_names.h"
#include "data/shard.h"

namespace dark::data {

enum class WindowMode { document, packed };

// Number of windows of seq_len + 1 tokens (stride seq_len) in num_tokens tokens.
std::int64_t count_windows(std::int64_t num_tokens, std::int64_t seq_len);

class WindowLayout {
 public:
  // `who` names the caller in errors ("train loader"). Document mode throws when no document is
  // long enough for one window, naming the longest document and seq_len.
  WindowLayout(const TokenShard& shard, std::int64_t seq_len, WindowMode mode, std::string_view who);

  WindowMode mode() const { return mode_; }
  std::int64_t seq_len() const { return seq_len_; }
  std::int64_t size() const { return size_; }
  // The shard position of window `window`'s first token (O(log documents) in document mode).
  std::int64_t start(std::int64_t window) const;
  // Tokens that lie inside some window, and their share of the shard's tokens.
  std::int64_t covered_tokens() const { return covered_; }
  std::int64_t shard_tokens() const { return shard_tokens_; }
  double token_share() const;
  // Documents of the shard (document mode) or the header's count (packed).
  std::int64_t documents() const { return documents_; }

 private:
  WindowMode mode_;
  std::int64_t seq_len_, shard_tokens_, size_ = 0, covered_ = 0, documents_ = 0;
  // Document mode: per document with at least one window, its first token and the number of
  // the first window it holds (ascending), for start()'s binary search.
  std::vector<std::int64_t> doc_start_, first_window_;
};

}  // namespace dark::data

namespace dark {
template <>
struct EnumNames<data::WindowMode> {
  static constexpr std::array<std::pair<data::WindowMode, std::string_view>, 2> table{
      {{data::WindowMode::document, "document"}, {data::WindowMode::packed, "packed"}}};
};
}  // namespace dark
