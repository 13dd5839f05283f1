// Byte-level BPE: special-token split, GPT-2 regex pre-tokenizer by hand over code points,
// rank-ordered merges, decode back to bytes. See bpe_tokenizer.h for the rules.
#include "data/bpe_tokenizer.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <functional>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "data/hash.h"

namespace dark::data {

namespace {

enum class Pre { gpt2, smollm };

// Code point classes of the GPT-2 regex. Invalid UTF-8 bytes are `other`.
enum Cls : std::uint8_t { kLetter = 0, kNumber = 1, kSpace = 2, kOther = 3 };

Cls classify_nonascii(char32_t c) {
  if (u_isUWhiteSpace(static_cast<UChar32>(c))) return kSpace;
  const std::uint32_t mask = U_GET_GC_MASK(static_cast<UChar32>(c));
  if (mask & U_GC_L_MASK) return kLetter;
  if (mask & U_GC_N_MASK) return kNumber;
  return kOther;
}

struct AsciiTable {
  std::array<Cls, 128> cls{};
  AsciiTable() {
    for (int c = 0; c < 128; ++c) cls[c] = classify_nonascii(static_cast<char32_t>(c));
  }
};
const AsciiTable& ascii_table() {
  static const AsciiTable t;
  return t;
}

// Decoded text: per code point its class, value (0xFFFFFFFF for an invalid byte) and byte
// offset; off has one more entry (the end).
struct CodePoints {
  std::vector<Cls> cls;
  std::vector<char32_t> cp;
  std::vector<std::uint32_t> off;
};

constexpr char32_t kInvalid = 0xFFFFFFFFu;

// Length of the valid UTF-8 sequence at s[i] (and its value), or 0 when it is invalid.
int utf8_sequence(std::string_view s, std::size_t i, char32_t& out) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const std::size_t left = s.size() - i;
  auto cont = [&](std::size_t k) { return (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80; };
  if (b0 < 0x80) {
    out = b0;
    return 1;
  }
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (left < 2 || !cont(1)) return 0;
    out = ((b0 & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
    return 2;
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (left < 3 || !cont(1) || !cont(2)) return 0;
    const char32_t c = ((b0 & 0x0Fu) << 12) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 6) |
                       (static_cast<unsigned char>(s[i + 2]) & 0x3Fu);
    if (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF)) return 0;  // overlong or surrogate
    out = c;
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (left < 4 || !cont(1) || !cont(2) || !cont(3)) return 0;
    const char32_t c = ((b0 & 0x07u) << 18) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 12) |
                       ((static_cast<unsigned char>(s[i + 2]) & 0x3Fu) << 6) |
                       (static_cast<unsigned char>(s[i + 3]) & 0x3Fu);
    if (c < 0x10000 || c > 0x10FFFF) return 0;
    out = c;
    return 4;
  }
  return 0;
}

void decode_code_points(std::string_view s, CodePoints& cps) {
  cps.cls.clear();
  cps.cp.clear();
  cps.off.clear();
  const AsciiTable& table = ascii_table();
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    cps.off.push_back(static_cast<std::uint32_t>(i));
    if (b0 < 0x80) {
      cps.cls.push_back(table.cls[b0]);
      cps.cp.push_back(b0);
      ++i;
      continue;
    }
    char32_t c = 0;
    const int len = utf8_sequence(s, i, c);
    if (len == 0) {
      cps.cls.push_back(kOther);
      cps.cp.push_back(kInvalid);
      ++i;
    } else {
      cps.cls.push_back(classify_nonascii(c));
      cps.cp.push_back(c);
      i += static_cast<std::size_t>(len);
    }
  }
  cps.off.push_back(static_cast<std::uint32_t>(s.size()));
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// GPT-2 regex over code points [b, e) of cps; calls emit(first, last) per match (code point
// indices, last exclusive). Alternatives, tried in order at each position:
//   's|'t|'re|'ve|'m|'ll|'d        contractions (lower case only)
//   ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'   a run of one class, with one optional
//                                  leading U+0020 when the next code point is not \s
//   \s+(?!\S)                      whitespace run not followed by a non-space: the whole run
//                                  at the end of the text, else all but its last code point
//   \s+                            (a single whitespace code point before a non-space)
template <class Emit>
void gpt2_regex(const CodePoints& cps, std::size_t b, std::size_t e, Emit&& emit) {
  const Cls* cls = cps.cls.data();
  const char32_t* cp = cps.cp.data();
  std::size_t i = b;
  while (i < e) {
    const char32_t c = cp[i];
    if (c == U'\'' && i + 1 < e) {
      const char32_t n1 = cp[i + 1];
      if (n1 == U's' || n1 == U't' || n1 == U'm' || n1 == U'd') {
        emit(i, i + 2);
        i += 2;
        continue;
      }
      if (i + 2 < e && ((n1 == U'r' && cp[i + 2] == U'e') || (n1 == U'v' && cp[i + 2] == U'e') ||
                        (n1 == U'l' && cp[i + 2] == U'l'))) {
        emit(i, i + 3);
        i += 3;
        continue;
      }
    }
    const std::size_t j = (c == U' ' && i + 1 < e && cls[i + 1] != kSpace) ? i + 1 : i;
    if (cls[j] != kSpace) {
      const Cls k = cls[j];
      std::size_t m = j + 1;
      while (m < e && cls[m] == k) ++m;
      emit(i, m);
      i = m;
      continue;
    }
    std::size_t m = i + 1;
    while (m < e && cls[m] == kSpace) ++m;
    if (m < e && m - i >= 2) --m;  // leave the last space to the next piece (" word")
    emit(i, m);
    i = m;
  }
}

// Pre-tokenizes `text`; emit(byte_begin, byte_end) per piece.
template <class Emit>
void pre_tokenize_impl(Pre pre, std::string_view text, CodePoints& cps, Emit&& emit) {
  if (text.empty()) return;
  decode_code_points(text, cps);
  const std::size_t n = cps.cls.size();
  auto emit_cp = [&](std::size_t first, std::size_t last) { emit(cps.off[first], cps.off[last]); };
  if (pre == Pre::gpt2) {
    gpt2_regex(cps, 0, n, emit_cp);
    return;
  }
  // smollm: every \p{N} code point alone, the regex between them.
  std::size_t start = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (cps.cls[i] != kNumber) continue;
    if (i > start) gpt2_regex(cps, start, i, emit_cp);
    emit_cp(i, i + 1);
    start = i + 1;
  }
  if (n > start) gpt2_regex(cps, start, n, emit_cp);
}

Pre parse_pre(const std::string& name) {
  if (name == "smollm") return Pre::smollm;
  if (name == "gpt2") return Pre::gpt2;
  std::string allowed;
  for (const auto& s : BpeTokenizer::supported_pre()) allowed += (allowed.empty() ? "\"" : ", \"") + s + "\"";
  throw Error(str("bpe tokenizer: unsupported pre-tokenizer '", name, "' (supported: ", allowed, ")"));
}

struct ByteUnicode {
  std::array<char32_t, 256> to_cp{};
  std::unordered_map<char32_t, unsigned char> to_byte;
  ByteUnicode() {
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      to_byte[to_cp[b]] = static_cast<unsigned char>(b);
    }
  }
};
const ByteUnicode& byte_unicode() {
  static const ByteUnicode t;
  return t;
}

// Open-addressing map (left id, right id) -> (rank, merged id).
class PairRanks {
 public:
  struct Value {
    std::int32_t rank;
    std::int32_t id;
  };
  void init(std::size_t n) {
    std::size_t cap = 16;
    while (cap < 2 * n + 16) cap <<= 1;
    keys_.assign(cap, kEmpty);
    values_.assign(cap, Value{INT_MAX, -1});
    mask_ = cap - 1;
  }
  // Keeps the first (lowest) rank for a pair seen twice.
  void insert(std::int32_t a, std::int32_t b, Value v) {
    const std::uint64_t key = pack(a, b);
    for (std::size_t h = slot(key);; h = (h + 1) & mask_) {
      if (keys_[h] == key) return;
      if (keys_[h] == kEmpty) {
        keys_[h] = key;
        values_[h] = v;
        return;
      }
    }
  }
  const Value* find(std::int32_t a, std::int32_t b) const {
    if (a < 0 || b < 0) return nullptr;  // (-1, -1) would alias an empty slot
    const std::uint64_t key = pack(a, b);
    for (std::size_t h = slot(key);; h = (h + 1) & mask_) {
      if (keys_[h] == key) return &values_[h];
      if (keys_[h] == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr std::uint64_t kEmpty = ~0ull;
  static std::uint64_t pack(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  std::size_t slot(std::uint64_t key) const { return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
  std::vector<std::uint64_t> keys_;
  std::vector<Value> values_;
  std::size_t mask_ = 0;
};

}  // namespace

struct BpeTokenizer::Impl {
  BpeVocab v;
  Pre pre = Pre::gpt2;
  std::unordered_map<std::string_view, std::int32_t> ids;  // views into v.tokens
  std::vector<std::string> decoded;                        // bytes each id decodes to
  std::array<std::int32_t, 256> byte_id{};  // -1: the vocabulary lacks the byte's piece
  std::vector<unsigned char> missing_bytes;
  PairRanks ranks;
  // Special tokens, longest first, grouped by first byte.
  std::array<std::vector<std::int32_t>, 256> specials_by_byte;
  bool has_specials = false;

  void bpe(std::string_view bytes, std::vector<std::int32_t>& out) const;
  void bpe_long(std::string_view bytes, std::vector<std::int32_t>& out) const;
  void encode_ordinary(std::string_view text, CodePoints& cps, std::vector<std::int32_t>& out) const {
    pre_tokenize_impl(pre, text, cps, [&](std::size_t first, std::size_t last) {
      bpe(text.substr(first, last - first), out);
    });
  }
};

// Short pre-tokens: symbols and the rank of each adjacent pair in arrays; each step merges
// the lowest-rank pair (leftmost on ties) and refreshes its two neighbouring pairs.
void BpeTokenizer::Impl::bpe(std::string_view bytes, std::vector<std::int32_t>& out) const {
  constexpr std::size_t kShort = 64;
  const std::size_t n = bytes.size();
  if (n == 1) {
    const std::int32_t id = byte_id[static_cast<unsigned char>(bytes[0])];
    if (id >= 0) out.push_back(id);
    return;
  }
  if (n > kShort) {
    bpe_long(bytes, out);
    return;
  }
  std::array<std::int32_t, kShort> sym;
  std::array<PairRanks::Value, kShort> pair;
  std::size_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t id = byte_id[static_cast<unsigned char>(bytes[i])];
    if (id >= 0) sym[m++] = id;
  }
  auto lookup = [&](std::size_t i) {
    const PairRanks::Value* v = ranks.find(sym[i], sym[i + 1]);
    return v ? *v : PairRanks::Value{INT_MAX, -1};
  };
  for (std::size_t i = 0; i + 1 < m; ++i) pair[i] = lookup(i);
  while (m > 1) {
    std::size_t best = 0;
    for (std::size_t i = 1; i + 1 < m; ++i)
      if (pair[i].rank < pair[best].rank) best = i;
    if (pair[best].rank == INT_MAX) break;
    sym[best] = pair[best].id;
    for (std::size_t i = best + 1; i + 1 < m; ++i) sym[i] = sym[i + 1];
    for (std::size_t i = best + 1; i + 2 < m; ++i) pair[i] = pair[i + 1];
    --m;
    if (best > 0) pair[best - 1] = lookup(best - 1);
    if (best + 1 < m) pair[best] = lookup(best);
  }
  out.insert(out.end(), sym.begin(), sym.begin() + static_cast<std::ptrdiff_t>(m));
}

// Long pre-tokens: a doubly linked list of symbols and a heap of candidate merges ordered by
// (rank, position), entries checked against the current symbols when popped.
void BpeTokenizer::Impl::bpe_long(std::string_view bytes, std::vector<std::int32_t>& out) const {
  std::vector<std::int32_t> sym;
  sym.reserve(bytes.size());
  for (const char c : bytes)
    if (const std::int32_t id = byte_id[static_cast<unsigned char>(c)]; id >= 0) sym.push_back(id);
  const std::size_t n = sym.size();
  if (n == 0) return;
  std::vector<std::int32_t> prev(n), next(n);
  for (std::size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<std::int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<std::int32_t>(i + 1) : -1;
  }
  struct Cand {
    std::int32_t rank, left, right, left_id, right_id, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](std::int32_t left) {
    if (left < 0 || next[left] < 0) return;
    const std::int32_t right = next[left];
    if (const PairRanks::Value* v = ranks.find(sym[left], sym[right]))
      heap.push(Cand{v->rank, left, right, sym[left], sym[right], v->id});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) push(static_cast<std::int32_t>(i));
  std::vector<bool> alive(n, true);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    if (!alive[c.left] || !alive[c.right] || next[c.left] != c.right || sym[c.left] != c.left_id ||
        sym[c.right] != c.right_id)
      continue;
    sym[c.left] = c.merged;
    alive[c.right] = false;
    next[c.left] = next[c.right];
    if (next[c.right] >= 0) prev[next[c.right]] = c.left;
    push(prev[c.left]);
    push(c.left);
  }
  for (std::int32_t i = 0; i >= 0; i = next[i]) out.push_back(sym[i]);
}

const std::vector<std::string>& BpeTokenizer::supported_pre() {
  static const std::vector<std::string> names = {"smollm", "gpt2"};
  return names;
}

char32_t BpeTokenizer::byte_to_unicode(unsigned char b) { return byte_unicode().to_cp[b]; }

std::string BpeTokenizer::byte_encode(std::string_view bytes) {
  std::string out;
  for (const char c : bytes) append_utf8(out, byte_to_unicode(static_cast<unsigned char>(c)));
  return out;
}

BpeTokenizer::BpeTokenizer(BpeVocab vocab) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.v = std::move(vocab);
  BpeVocab& v = m.v;
  const auto n = static_cast<std::int64_t>(v.tokens.size());
  DARK_CHECK(n > 0 && n < INT32_MAX, "bpe tokenizer: vocabulary of ", n, " tokens (need 1 .. 2^31-2)");
  m.pre = parse_pre(v.pre);
  DARK_CHECK(v.kind == "gguf" || v.kind == "hf", "bpe tokenizer: kind \"", v.kind, "\" (allowed: gguf, hf)");
  if (v.token_types.empty()) v.token_types.assign(v.tokens.size(), static_cast<std::int32_t>(BpeTokenType::normal));
  DARK_CHECK(v.token_types.size() == v.tokens.size(), "bpe tokenizer: ", v.token_types.size(), " token types for ",
             n, " tokens");
  for (std::int64_t i = 0; i < n; ++i)
    DARK_CHECK(v.token_types[i] >= 1 && v.token_types[i] <= 6, "bpe tokenizer: token ", i, " has type ",
               v.token_types[i], " (allowed 1..6)");
  DARK_CHECK(v.eos_id >= 0 && v.eos_id < n, "bpe tokenizer: eos id ", v.eos_id, " outside the vocabulary [0, ", n, ")");
  for (const auto& [name, id] : {std::pair<const char*, std::int32_t>{"bos", v.bos_id}, {"unk", v.unk_id}, {"pad", v.pad_id}})
    DARK_CHECK(id >= -1 && id < n, "bpe tokenizer: ", name, " id ", id, " outside the vocabulary [0, ", n, ")");

  m.ids.reserve(v.tokens.size());
  for (std::int64_t i = 0; i < n; ++i) m.ids.emplace(v.tokens[i], static_cast<std::int32_t>(i));  // first wins

  for (int b = 0; b < 256; ++b) {
    std::string piece;
    append_utf8(piece, byte_to_unicode(static_cast<unsigned char>(b)));
    const auto it = m.ids.find(piece);
    m.byte_id[b] = it != m.ids.end() ? it->second : -1;
    if (m.byte_id[b] < 0) m.missing_bytes.push_back(static_cast<unsigned char>(b));
  }

  m.ranks.init(v.merges.size());
  for (std::size_t r = 0; r < v.merges.size(); ++r) {
    const std::string& merge = v.merges[r];
    const std::size_t sp = merge.size() > 1 ? merge.find(' ', 1) : std::string::npos;
    DARK_CHECK(sp != std::string::npos && sp + 1 < merge.size(), "bpe tokenizer: merge ", r, " '", merge,
               "' is not \"left right\"");
    const std::string_view left(merge.data(), sp), right(merge.data() + sp + 1, merge.size() - sp - 1);
    const auto a = m.ids.find(left), b = m.ids.find(right);
    const auto ab = m.ids.find(std::string(left) + std::string(right));
    DARK_CHECK(a != m.ids.end() && b != m.ids.end() && ab != m.ids.end(), "bpe tokenizer: merge ", r, " '", merge,
               "' names a piece that is not in the vocabulary");
    m.ranks.insert(a->second, b->second, PairRanks::Value{static_cast<std::int32_t>(r), ab->second});
  }

  const ByteUnicode& bu = byte_unicode();
  m.decoded.resize(v.tokens.size());
  std::vector<std::int32_t> specials;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto type = static_cast<BpeTokenType>(v.token_types[i]);
    const std::string& t = v.tokens[i];
    if (type == BpeTokenType::control || type == BpeTokenType::user_defined) {
      if (i != v.bos_id && i != v.eos_id) m.decoded[i] = t;
      if (!t.empty()) specials.push_back(static_cast<std::int32_t>(i));
      continue;
    }
    // Byte-level piece: each code point that stands for a byte gives that byte; any other
    // code point (not produced by encode) keeps its UTF-8 bytes.
    std::string& d = m.decoded[i];
    for (std::size_t k = 0; k < t.size();) {
      char32_t c = 0;
      const int len = utf8_sequence(t, k, c);
      if (len == 0) {
        d.push_back(t[k]);
        ++k;
        continue;
      }
      const auto it = bu.to_byte.find(c);
      if (it != bu.to_byte.end()) {
        d.push_back(static_cast<char>(it->second));
      } else {
        d.append(t, k, static_cast<std::size_t>(len));
      }
      k += static_cast<std::size_t>(len);
    }
  }
  std::stable_sort(specials.begin(), specials.end(), [&](std::int32_t a, std::int32_t b) {
    return v.tokens[a].size() > v.tokens[b].size();
  });
  for (const std::int32_t id : specials) {
    auto& group = m.specials_by_byte[static_cast<unsigned char>(v.tokens[id][0])];
    // Two tokens with the same text: the first id wins.
    bool dup = false;
    for (const std::int32_t o : group) dup = dup || v.tokens[o] == v.tokens[id];
    if (!dup) group.push_back(id);
  }
  m.has_specials = !specials.empty();

  std::uint64_t h = fnv1a64("gguf-bpe\n" + v.pre + "\n");
  for (std::int64_t i = 0; i < n; ++i) {
    h = fnv1a64(v.tokens[i], h);
    h = fnv1a64(str("\t", v.token_types[i], "\n"), h);
  }
  h = fnv1a64("merges\n", h);
  for (const auto& merge : v.merges) {
    h = fnv1a64(merge, h);
    h = fnv1a64("\n", h);
  }
  h = fnv1a64(str("bos ", v.bos_id, " eos ", v.eos_id, " unk ", v.unk_id, " pad ", v.pad_id, "\n"), h);
  hash_ = "gguf-bpe-" + hex64(h);
}

BpeTokenizer::~BpeTokenizer() = default;

const BpeVocab& BpeTokenizer::vocab() const { return impl_->v; }
std::string BpeTokenizer::kind() const { return impl_->v.kind; }

std::vector<std::int32_t> BpeTokenizer::encode(std::string_view text) const {
  const Impl& m = *impl_;
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3 + 8);
  CodePoints cps;
  std::size_t start = 0;  // first byte not yet tokenized
  if (m.has_specials) {
    for (std::size_t i = 0; i < text.size();) {
      const auto& group = m.specials_by_byte[static_cast<unsigned char>(text[i])];
      std::int32_t hit = -1;
      for (const std::int32_t id : group) {
        const std::string& t = m.v.tokens[id];
        if (text.size() - i >= t.size() && std::memcmp(text.data() + i, t.data(), t.size()) == 0) {
          hit = id;
          break;
        }
      }
      if (hit < 0) {
        ++i;
        continue;
      }
      m.encode_ordinary(text.substr(start, i - start), cps, out);
      out.push_back(hit);
      i += m.v.tokens[hit].size();
      start = i;
    }
  }
  m.encode_ordinary(text.substr(start), cps, out);
  return out;
}

std::string BpeTokenizer::decode(std::span<const std::int32_t> ids) const {
  const Impl& m = *impl_;
  const auto n = static_cast<std::int32_t>(m.v.tokens.size());
  std::string out;
  for (const std::int32_t id : ids) {
    DARK_CHECK(id >= 0 && id < n, "bpe tokenizer: decode: id ", id, " outside the vocabulary [0, ", n, ")");
    out += m.decoded[id];
  }
  return out;
}

std::vector<std::string_view> BpeTokenizer::pre_tokenize(std::string_view text) const {
  return pre_tokenize(text, impl_->v.pre);
}

std::vector<std::string_view> BpeTokenizer::pre_tokenize(std::string_view text, const std::string& pre) {
  std::vector<std::string_view> out;
  CodePoints cps;
  pre_tokenize_impl(parse_pre(pre), text, cps,
                    [&](std::size_t first, std::size_t last) { out.push_back(text.substr(first, last - first)); });
  return out;
}

std::int32_t BpeTokenizer::vocab_size() const { return static_cast<std::int32_t>(impl_->v.tokens.size()); }
std::int32_t BpeTokenizer::eos_id() const { return impl_->v.eos_id; }
std::int32_t BpeTokenizer::bos_id() const { return impl_->v.bos_id; }
std::int32_t BpeTokenizer::unk_id() const { return impl_->v.unk_id; }
std::int32_t BpeTokenizer::pad_id() const { return impl_->v.pad_id; }
const std::string& BpeTokenizer::pre() const { return impl_->v.pre; }
bool BpeTokenizer::add_bos() const { return impl_->v.add_bos; }

std::string BpeTokenizer::piece(std::int32_t id) const {
  const auto n = vocab_size();
  DARK_CHECK(id >= 0 && id < n, "bpe tokenizer: id ", id, " outside the vocabulary [0, ", n, ")");
  return impl_->v.tokens[id];
}

BpeTokenType BpeTokenizer::token_type(std::int32_t id) const {
  const auto n = vocab_size();
  DARK_CHECK(id >= 0 && id < n, "bpe tokenizer: id ", id, " outside the vocabulary [0, ", n, ")");
  return static_cast<BpeTokenType>(impl_->v.token_types[id]);
}

const std::vector<unsigned char>& BpeTokenizer::missing_bytes() const { return impl_->missing_bytes; }

std::int32_t BpeTokenizer::token_id(std::string_view piece) const {
  const auto it = impl_->ids.find(piece);
  return it == impl_->ids.end() ? -1 : it->second;
}

}  // namespace dark::data
