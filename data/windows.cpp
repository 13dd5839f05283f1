// WindowLayout: packed and document windows (see windows.h).
#include "data/windows.h"

#include <algorithm>

#include "core/error.h"
#include "data/documents.h"

namespace dark::data {

std::int64_t count_windows(std::int64_t num_tokens, std::int64_t seq_len) {
  return num_tokens > seq_len ? (num_tokens - 1) / seq_len : 0;
}

WindowLayout::WindowLayout(const TokenShard& shard, std::int64_t seq_len, WindowMode mode, std::string_view who)
    : mode_(mode), seq_len_(seq_len), shard_tokens_(shard.size()) {
  DARK_CHECK(seq_len > 0, who, ": seq_len must be positive, got ", seq_len);
  if (mode == WindowMode::packed) {
    size_ = count_windows(shard_tokens_, seq_len);
    covered_ = size_ > 0 ? size_ * seq_len + 1 : 0;
    documents_ = shard.info().num_documents;
    return;
  }
  const ShardDocuments docs = find_documents(shard);
  documents_ = docs.count();
  std::int64_t longest = 0;
  for (std::int64_t d = 0; d < docs.count(); ++d) {
    const std::int64_t length = docs.length(d), n = count_windows(length, seq_len);
    longest = std::max(longest, length);
    if (n == 0) continue;
    doc_start_.push_back(docs.start(d));
    first_window_.push_back(size_);
    size_ += n;
    covered_ += n * seq_len + 1;
  }
  DARK_CHECK(size_ > 0, who, ": no document of ", shard.path(), " is long enough for one window (data.windows "
             "\"document\"): its longest of ", documents_, " documents has ", longest,
             " tokens, a window needs seq_len + 1 = ", seq_len + 1,
             "; lower data.seq_len, use a corpus with longer documents (longdocs), or set data.windows \"packed\"");
}

std::int64_t WindowLayout::start(std::int64_t window) const {
  DARK_CHECK(window >= 0 && window < size_, "window ", window, " outside [0, ", size_, ")");
  if (mode_ == WindowMode::packed) return window * seq_len_;
  // The last document whose first window is <= window.
  const auto it = std::upper_bound(first_window_.begin(), first_window_.end(), window) - 1;
  const auto d = static_cast<std::size_t>(it - first_window_.begin());
  return doc_start_[d] + (window - first_window_[d]) * seq_len_;
}

double WindowLayout::token_share() const {
  return shard_tokens_ > 0 ? static_cast<double>(covered_) / static_cast<double>(shard_tokens_) : 0.0;
}

}  // namespace dark::data
