// SentencePiece-style tokenizer (llama.cpp's SPM): user-defined token split, "▁" escaping,
// score-ordered pair merges with a priority queue, byte fallback, decode. See
// spm_tokenizer.h for the rules.
// Speed (same ids as merging each fragment whole): a trie finds the user-defined tokens a
// text holds in one pass, so only those are searched for; a fragment is cut before each "▁"
// that no piece can span (a cut a merge could cross is never made), and each chunk (a word,
// mostly) is merged with its own small queue, once per distinct chunk per encode() call.
#include "data/spm_tokenizer.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "core/error.h"
#include "data/hash.h"
#include "data/space_symbol.h"

namespace dark::data {

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The byte a byte token "<0xXX>" stands for, -1 when the text is not of that form.
int byte_of_piece(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  const int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// One symbol of a chunk being merged: bytes [begin, begin + n) of the chunk, linked to its
// neighbours (-1: none). n == 0 once merged into its left neighbour.
struct Symbol {
  std::int32_t prev;
  std::int32_t next;
  std::uint32_t begin;
  std::uint32_t n;
};

// A candidate merge of symbols left and right into a piece of `score`; stale when either
// side has changed since (their sizes no longer add up to `size`).
struct Bigram {
  float score;
  std::int32_t left;
  std::int32_t right;
  std::uint32_t size;
};

// Priority: the highest score, then the leftmost pair.
struct BigramBelow {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

// Hashes std::string and std::string_view alike (heterogeneous lookup).
struct ViewHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Working memory of one encode() call (so the tokenizer itself holds no mutable state).
struct Scratch {
  static constexpr std::size_t kMaxCachedBytes = 64;
  static constexpr std::size_t kMaxCacheEntries = 1 << 16;
  std::vector<Symbol> sym;
  std::vector<Bigram> heap;
  std::vector<std::size_t> spanned;
  std::unordered_map<std::string, std::vector<std::int32_t>, ViewHash, std::equal_to<>> cache;
};

// A piece of the text after the user-defined token split: a token id, or raw bytes [begin, end).
struct Fragment {
  std::size_t begin;
  std::size_t end;
  std::int32_t id;  // -1: raw text
};

}  // namespace

struct SpmTokenizer::Impl {
  SpmVocab v;
  std::unordered_map<std::string_view, std::int32_t> ids;  // views into v.tokens
  std::size_t max_piece_bytes = 0;
  std::vector<std::string> decoded;          // bytes each id decodes to
  std::array<std::int32_t, 256> byte_id{};   // fallback id of each byte, -1: dropped
  std::vector<std::int32_t> split_order;     // user-defined tokens, longest first, then by id
  // A trie of the user-defined tokens, to find in one pass which of them occur in a text:
  // node 0 is the root; a node's children are (byte, node) pairs sorted by byte.
  struct TrieNode {
    std::int32_t rank = -1;  // index in split_order of the token ending here, -1: none
    std::vector<std::pair<unsigned char, std::int32_t>> next;
  };
  std::vector<TrieNode> trie;
  std::array<bool, 256> starts_token{};  // bytes a user-defined token starts with
  std::vector<std::int32_t> inner_space_pieces;  // pieces with a "▁" after their first byte
  // With more such pieces than this, fragments are merged whole (finding them all would cost
  // more than the chunking saves).
  static constexpr std::size_t kMaxInnerSpacePieces = 64;

  // Which user-defined tokens (by rank in split_order) occur somewhere in `text`.
  std::vector<bool> present_tokens(std::string_view text) const;
  // The text cut into raw fragments and user-defined tokens (step 1 of encode).
  void split(std::string_view text, std::vector<Fragment>& frags) const;
  // Merges one escaped fragment `s` into ids appended to `out`.
  void merge(std::string_view s, Scratch& w, std::vector<std::int32_t>& out) const;
  // Merges one chunk of a fragment (text between cuts) into ids appended to `out`.
  void merge_chunk(std::string_view s, Scratch& w, std::vector<std::int32_t>& out) const;
};

std::vector<bool> SpmTokenizer::Impl::present_tokens(std::string_view text) const {
  std::vector<bool> present(split_order.size(), false);
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (!starts_token[static_cast<unsigned char>(text[i])]) continue;
    std::int32_t node = 0;
    for (std::size_t j = i; j < text.size(); ++j) {
      const auto& next = trie[node].next;
      const auto c = static_cast<unsigned char>(text[j]);
      const auto it = std::lower_bound(next.begin(), next.end(), std::pair<unsigned char, std::int32_t>{c, -1});
      if (it == next.end() || it->first != c) break;
      node = it->second;
      if (trie[node].rank >= 0) present[trie[node].rank] = true;
    }
  }
  return present;
}

void SpmTokenizer::Impl::split(std::string_view text, std::vector<Fragment>& frags) const {
  frags.clear();
  if (text.empty()) return;
  frags.push_back({0, text.size(), -1});
  if (split_order.empty()) return;
  const std::vector<bool> present = present_tokens(text);
  std::vector<Fragment> next;
  for (std::size_t rank = 0; rank < split_order.size(); ++rank) {
    if (!present[rank]) continue;  // in no fragment either
    const std::int32_t id = split_order[rank];
    const std::string_view t = v.tokens[id];
    next.clear();
    for (const Fragment& f : frags) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view upto = text.substr(0, f.end);
      std::size_t pos = f.begin;
      for (std::size_t m; (m = upto.find(t, pos)) != std::string_view::npos; pos = m + t.size()) {
        if (m > pos) next.push_back({pos, m, -1});
        next.push_back({m, m + t.size(), id});
      }
      if (pos < f.end) next.push_back({pos, f.end, -1});
    }
    frags.swap(next);
  }
}

void SpmTokenizer::Impl::merge(std::string_view s, Scratch& w, std::vector<std::int32_t>& out) const {
  DARK_CHECK(s.size() < static_cast<std::size_t>(INT32_MAX), "spm tokenizer: a text fragment of ", s.size(),
             " bytes (the limit is 2^31-1)");
  // Cuts: before each "▁" that no piece can span, i.e. unless an occurrence of a piece with
  // an inner "▁" has that "▁" there. No merge crosses a cut (the symbol it made would be
  // such a piece there), so the chunks between cuts merge independently, each with its own
  // small queue, into the symbols the whole fragment would give.
  const bool can_cut = inner_space_pieces.size() <= kMaxInnerSpacePieces;
  std::vector<std::size_t>& spanned = w.spanned;  // byte offsets of the "▁"s those pieces cover
  spanned.clear();
  if (can_cut) {
    for (const std::int32_t id : inner_space_pieces) {
      const std::string_view p = v.tokens[id];
      for (std::size_t at = s.find(p); at != std::string_view::npos; at = s.find(p, at + 1))
        for (std::size_t k = p.find(kSpaceSymbol, 1); k != std::string_view::npos; k = p.find(kSpaceSymbol, k + 1))
          spanned.push_back(at + k);
    }
    std::sort(spanned.begin(), spanned.end());
  }
  std::size_t next_spanned = 0;
  auto is_cut = [&](std::size_t off) {
    if (!can_cut || s.compare(off, kSpaceSymbol.size(), kSpaceSymbol) != 0) return false;
    while (next_spanned < spanned.size() && spanned[next_spanned] < off) ++next_spanned;
    return next_spanned == spanned.size() || spanned[next_spanned] != off;
  };
  auto char_end = [&](std::size_t off) {
    return off + std::min(char_bytes(static_cast<unsigned char>(s[off])), s.size() - off);
  };

  for (std::size_t begin = 0; begin < s.size();) {
    std::size_t end = char_end(begin);  // the chunk is bytes [begin, end)
    while (end < s.size() && !is_cut(end)) end = char_end(end);
    // A chunk's ids depend only on its bytes: repeated words are merged once per call.
    const std::string_view chunk = s.substr(begin, end - begin);
    const bool cacheable = chunk.size() <= Scratch::kMaxCachedBytes;
    if (cacheable) {
      const auto hit = w.cache.find(chunk);
      if (hit != w.cache.end()) {
        out.insert(out.end(), hit->second.begin(), hit->second.end());
        begin = end;
        continue;
      }
    }
    const std::size_t out_before = out.size();
    merge_chunk(chunk, w, out);
    if (cacheable && w.cache.size() < Scratch::kMaxCacheEntries)
      w.cache.emplace(std::string(chunk),
                      std::vector<std::int32_t>(out.begin() + static_cast<std::ptrdiff_t>(out_before), out.end()));
    begin = end;
  }
}

void SpmTokenizer::Impl::merge_chunk(std::string_view s, Scratch& w, std::vector<std::int32_t>& out) const {
  std::vector<Symbol>& sym = w.sym;
  sym.clear();
  for (std::size_t off = 0; off < s.size();) {
    const std::size_t n = std::min(char_bytes(static_cast<unsigned char>(s[off])), s.size() - off);
    const auto index = static_cast<std::int32_t>(sym.size());
    sym.push_back({index - 1, index + 1, static_cast<std::uint32_t>(off), static_cast<std::uint32_t>(n)});
    off += n;
  }
  sym.back().next = -1;
  const std::int32_t first = 0, last = static_cast<std::int32_t>(sym.size());
  std::vector<Bigram>& heap = w.heap;  // a max-heap by BigramBelow
  heap.clear();
  auto try_pair = [&](std::int32_t left, std::int32_t right) {
    if (left < 0 || right < 0) return;
    const std::size_t size = sym[left].n + sym[right].n;
    if (size > max_piece_bytes) return;
    const auto it = ids.find(s.substr(sym[left].begin, size));
    if (it == ids.end()) return;
    heap.push_back({v.scores[it->second], left, right, static_cast<std::uint32_t>(size)});
    std::push_heap(heap.begin(), heap.end(), BigramBelow{});
  };
  for (std::int32_t i = first + 1; i < last; ++i) try_pair(i - 1, i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), BigramBelow{});
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol& left = sym[b.left];
    Symbol& right = sym[b.right];
    if (left.n == 0 || right.n == 0 || left.n + right.n != b.size) continue;  // stale
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = b.left;
    try_pair(left.prev, b.left);
    try_pair(b.left, left.next);
  }
  for (std::int32_t i = first; i >= 0; i = sym[i].next) {
    const std::string_view piece = s.substr(sym[i].begin, sym[i].n);
    const auto it = ids.find(piece);
    if (it != ids.end()) {
      out.push_back(it->second);
      continue;
    }
    for (const char c : piece) {
      const std::int32_t id = byte_id[static_cast<unsigned char>(c)];
      if (id >= 0) out.push_back(id);
    }
  }
}

SpmTokenizer::SpmTokenizer(SpmVocab vocab) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.v = std::move(vocab);
  SpmVocab& v = m.v;
  const auto n = static_cast<std::int64_t>(v.tokens.size());
  DARK_CHECK(n > 0 && n < INT32_MAX, "spm tokenizer: vocabulary of ", n, " tokens (need 1 .. 2^31-2)");
  DARK_CHECK(static_cast<std::int64_t>(v.scores.size()) == n, "spm tokenizer: ", v.scores.size(), " scores for ", n,
             " tokens");
  for (std::int64_t i = 0; i < n; ++i)
    DARK_CHECK(std::isfinite(v.scores[i]), "spm tokenizer: token ", i, " has score ", v.scores[i], " (not finite)");
  if (v.token_types.empty()) v.token_types.assign(v.tokens.size(), static_cast<std::int32_t>(BpeTokenType::normal));
  DARK_CHECK(static_cast<std::int64_t>(v.token_types.size()) == n, "spm tokenizer: ", v.token_types.size(),
             " token types for ", n, " tokens");
  for (std::int64_t i = 0; i < n; ++i) {
    DARK_CHECK(v.token_types[i] >= 1 && v.token_types[i] <= 6, "spm tokenizer: token ", i, " has type ",
               v.token_types[i], " (allowed 1..6)");
    DARK_CHECK(v.token_types[i] != static_cast<std::int32_t>(BpeTokenType::byte) || byte_of_piece(v.tokens[i]) >= 0,
               "spm tokenizer: token ", i, " has type 6 (byte) but its text is not <0xXX>");
  }
  DARK_CHECK(v.eos_id >= 0 && v.eos_id < n, "spm tokenizer: eos id ", v.eos_id, " outside the vocabulary [0, ", n, ")");
  for (const auto& [name, id] : {std::pair<const char*, std::int32_t>{"bos", v.bos_id}, {"unk", v.unk_id}, {"pad", v.pad_id}})
    DARK_CHECK(id >= -1 && id < n, "spm tokenizer: ", name, " id ", id, " outside the vocabulary [0, ", n, ")");
  DARK_CHECK(!v.add_bos || v.bos_id >= 0, "spm tokenizer: add_bos is set but there is no bos id");

  m.ids.reserve(v.tokens.size());
  m.decoded.resize(v.tokens.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::string& t = v.tokens[i];
    if (!t.empty()) {  // an empty piece can never be matched
      const auto [it, added] = m.ids.emplace(t, static_cast<std::int32_t>(i));
      DARK_CHECK(added, "spm tokenizer: tokens ", it->second, " and ", i, " have the same text");
      m.max_piece_bytes = std::max(m.max_piece_bytes, t.size());
    }
    std::string& d = m.decoded[i];
    switch (static_cast<BpeTokenType>(v.token_types[i])) {
      case BpeTokenType::normal:
        for (std::size_t k = 0; k < t.size();) {
          if (t.compare(k, kSpaceSymbol.size(), kSpaceSymbol) == 0) {
            d.push_back(' ');
            k += kSpaceSymbol.size();
          } else {
            d.push_back(t[k++]);
          }
        }
        break;
      case BpeTokenType::user_defined: d = t; break;
      case BpeTokenType::byte: d.assign(1, static_cast<char>(byte_of_piece(t))); break;
      case BpeTokenType::unknown:
      case BpeTokenType::control:
      case BpeTokenType::unused: break;
    }
    if (v.token_types[i] == static_cast<std::int32_t>(BpeTokenType::user_defined) && !t.empty())
      m.split_order.push_back(static_cast<std::int32_t>(i));
    if (t.size() > 1 && t.find(kSpaceSymbol, 1) != std::string::npos)
      m.inner_space_pieces.push_back(static_cast<std::int32_t>(i));
  }
  std::stable_sort(m.split_order.begin(), m.split_order.end(), [&](std::int32_t a, std::int32_t b) {
    return v.tokens[a].size() > v.tokens[b].size();
  });
  m.trie.emplace_back();
  for (std::size_t rank = 0; rank < m.split_order.size(); ++rank) {
    const std::string& t = v.tokens[m.split_order[rank]];
    m.starts_token[static_cast<unsigned char>(t[0])] = true;
    std::int32_t node = 0;
    for (const char ch : t) {
      const auto c = static_cast<unsigned char>(ch);
      auto& next = m.trie[node].next;
      auto it = std::lower_bound(next.begin(), next.end(), std::pair<unsigned char, std::int32_t>{c, -1});
      if (it == next.end() || it->first != c) {
        const auto child = static_cast<std::int32_t>(m.trie.size());
        next.insert(it, {c, child});
        m.trie.emplace_back();  // may move `next`: not used again below
        node = child;
      } else {
        node = it->second;
      }
    }
    m.trie[node].rank = static_cast<std::int32_t>(rank);
  }

  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = m.ids.find(name);
    if (it == m.ids.end()) it = m.ids.find(std::string(1, static_cast<char>(b)));
    m.byte_id[b] = it != m.ids.end() ? it->second : v.unk_id;
  }

  std::uint64_t h = fnv1a64("gguf-spm\n");
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &v.scores[i], sizeof bits);
    char tail[40];
    std::snprintf(tail, sizeof tail, "\t%d\t%08x\n", static_cast<int>(v.token_types[i]), static_cast<unsigned>(bits));
    h = fnv1a64(v.tokens[i], h);
    h = fnv1a64(tail, h);
  }
  h = fnv1a64(str("bos ", v.bos_id, " eos ", v.eos_id, " unk ", v.unk_id, " pad ", v.pad_id, " add_bos ", v.add_bos,
                  " add_eos ", v.add_eos, " add_space_prefix ", v.add_space_prefix, "\n"),
              h);
  hash_ = "gguf-spm-" + hex64(h);
}

SpmTokenizer::~SpmTokenizer() = default;

const SpmVocab& SpmTokenizer::vocab() const { return impl_->v; }

std::vector<std::int32_t> SpmTokenizer::encode(std::string_view text) const {
  const Impl& m = *impl_;
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3 + 8);
  std::vector<Fragment> frags;
  m.split(text, frags);
  std::string escaped;
  Scratch scratch;
  bool after_token = true;  // the first fragment counts as following a token
  for (const Fragment& f : frags) {
    if (f.id >= 0) {
      out.push_back(f.id);
      after_token = true;
      continue;
    }
    const std::string_view raw = text.substr(f.begin, f.end - f.begin);
    escaped.clear();
    escaped.reserve(raw.size() + 2 * static_cast<std::size_t>(std::count(raw.begin(), raw.end(), ' ')) + 3);
    if (m.v.add_space_prefix && after_token) escaped += kSpaceSymbol;
    for (const char c : raw) {
      if (c == ' ') {
        escaped += kSpaceSymbol;
      } else {
        escaped.push_back(c);
      }
    }
    m.merge(escaped, scratch, out);
    after_token = false;
  }
  return out;
}

std::vector<std::int32_t> SpmTokenizer::tokenize(std::string_view text, bool add_special) const {
  const SpmVocab& v = impl_->v;
  std::vector<std::int32_t> out;
  if (add_special && v.add_bos) out.push_back(v.bos_id);
  const std::vector<std::int32_t> body = encode(text);
  out.insert(out.end(), body.begin(), body.end());
  if (add_special && v.add_eos) out.push_back(v.eos_id);
  return out;
}

std::string SpmTokenizer::decode(std::span<const std::int32_t> ids) const {
  const Impl& m = *impl_;
  const auto n = static_cast<std::int32_t>(m.v.tokens.size());
  std::string out;
  for (std::size_t k = 0; k < ids.size(); ++k) {
    const std::int32_t id = ids[k];
    DARK_CHECK(id >= 0 && id < n, "spm tokenizer: decode: id ", id, " outside the vocabulary [0, ", n, ")");
    const std::string& d = m.decoded[id];
    const bool strip = k == 0 && m.v.add_space_prefix && !d.empty() && d[0] == ' ';
    out.append(d, strip ? 1 : 0);
  }
  return out;
}

std::int32_t SpmTokenizer::vocab_size() const { return static_cast<std::int32_t>(impl_->v.tokens.size()); }
std::int32_t SpmTokenizer::eos_id() const { return impl_->v.eos_id; }
std::int32_t SpmTokenizer::bos_id() const { return impl_->v.bos_id; }
std::int32_t SpmTokenizer::unk_id() const { return impl_->v.unk_id; }
std::int32_t SpmTokenizer::pad_id() const { return impl_->v.pad_id; }
bool SpmTokenizer::add_bos() const { return impl_->v.add_bos; }
bool SpmTokenizer::add_eos() const { return impl_->v.add_eos; }
bool SpmTokenizer::add_space_prefix() const { return impl_->v.add_space_prefix; }

std::string SpmTokenizer::piece(std::int32_t id) const {
  const auto n = vocab_size();
  DARK_CHECK(id >= 0 && id < n, "spm tokenizer: id ", id, " outside the vocabulary [0, ", n, ")");
  return impl_->v.tokens[id];
}

BpeTokenType SpmTokenizer::token_type(std::int32_t id) const {
  const auto n = vocab_size();
  DARK_CHECK(id >= 0 && id < n, "spm tokenizer: id ", id, " outside the vocabulary [0, ", n, ")");
  return static_cast<BpeTokenType>(impl_->v.token_types[id]);
}

float SpmTokenizer::score(std::int32_t id) const {
  const auto n = vocab_size();
  DARK_CHECK(id >= 0 && id < n, "spm tokenizer: id ", id, " outside the vocabulary [0, ", n, ")");
  return impl_->v.scores[id];
}

std::int32_t SpmTokenizer::token_id(std::string_view piece) const {
  const auto it = impl_->ids.find(piece);
  return it == impl_->ids.end() ? -1 : it->second;
}

}  // namespace dark::data
