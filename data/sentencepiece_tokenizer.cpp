// SentencePieceTokenizer over the SentencePiece C++ API (Debian libsentencepiece-dev).
#include "data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <climits>
#include <cstdio>
#include <exception>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "core/file_io.h"
#include "data/hash.h"
#include "data/space_symbol.h"

namespace dark::data {

struct SentencePieceTokenizer::Impl {
  std::string bytes;
  sentencepiece::SentencePieceProcessor processor;
  std::vector<int> meta_space_ids;  // the byte pieces of kSpaceSymbol's 3 bytes; empty without them
  std::vector<std::int8_t> types;   // each piece's type, read from the model bytes (piece_types)
};

namespace {

// The byte pieces <0xE2> <0x96> <0x81> of kSpaceSymbol "▁", or nothing when the model lacks
// one (no byte_fallback). SentencePiece's normalizer turns spaces into "▁" and decoding turns
// every one back into a space, so a "▁" of the text itself would come back as " ": encode()
// emits these byte pieces for it instead, which decode to its bytes.
std::vector<int> meta_space_byte_ids(const sentencepiece::SentencePieceProcessor& p) {
  std::vector<int> ids;
  for (const char byte : kSpaceSymbol) {
    char piece[8];
    std::snprintf(piece, sizeof piece, "<0x%02X>", static_cast<unsigned char>(byte));
    const int id = p.PieceToId(piece);
    if (id < 0 || id >= p.GetPieceSize() || !p.IsByte(id) || p.IdToPiece(id) != piece) return {};
    ids.push_back(id);
  }
  return ids;
}

// Feeds the sampled lines to the trainer.
class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& lines) : lines_(lines) {}
  bool done() const override { return index_ >= lines_.size(); }
  void Next() override { ++index_; }
  const std::string& value() const override { return lines_[index_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& lines_;
  std::size_t index_ = 0;
};

// One protobuf varint at bytes[at...]; advances `at`. False when truncated or over 10 bytes.
bool read_varint(std::string_view bytes, std::size_t& at, std::uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 70 && at < bytes.size(); shift += 7) {
    const auto b = static_cast<unsigned char>(bytes[at++]);
    value |= static_cast<std::uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// Skips the value of a field of protobuf wire type `wire` at bytes[at...]; false when malformed.
bool skip_field(std::string_view bytes, std::size_t& at, std::uint64_t wire, std::string_view* payload = nullptr) {
  std::uint64_t n = 0;
  switch (wire) {
    case 0: return read_varint(bytes, at, n);
    case 1: n = 8; break;
    case 2:
      if (!read_varint(bytes, at, n)) return false;
      break;
    case 5: n = 4; break;
    default: return false;
  }
  if (n > bytes.size() - at) return false;
  if (payload) *payload = bytes.substr(at, n);
  at += n;
  return true;
}

// The type of each piece of a serialized ModelProto (field 1: repeated SentencePiece, whose
// field 3 is the type, NORMAL = 1 when absent). The processor's API has no IsUserDefined, so
// the types are read from the bytes themselves; empty when the bytes are malformed.
std::vector<std::int8_t> piece_types(std::string_view model) {
  std::vector<std::int8_t> types;
  for (std::size_t at = 0; at < model.size();) {
    std::uint64_t key = 0;
    std::string_view piece;
    if (!read_varint(model, at, key) || !skip_field(model, at, key & 7, &piece)) return {};
    if (key != ((1 << 3) | 2)) continue;
    std::int8_t type = 1;
    for (std::size_t p = 0; p < piece.size();) {
      std::uint64_t k = 0, v = 0;
      if (!read_varint(piece, p, k)) return {};
      if (k == ((3 << 3) | 0)) {
        if (!read_varint(piece, p, v) || v < 1 || v > 6) return {};
        type = static_cast<std::int8_t>(v);
      } else if (!skip_field(piece, p, k & 7)) {
        return {};
      }
    }
    types.push_back(type);
  }
  return types;
}

std::string format_double(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

}  // namespace

LineSampler::LineSampler(std::int64_t max_lines, std::uint64_t seed) : max_lines_(max_lines), seed_(seed) {
  DARK_CHECK(max_lines > 0, "tokenizer line sample: max_lines must be positive, got ", max_lines);
}

void LineSampler::add_text(std::string_view text) {
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (line.empty() || line.size() > kMaxLineBytes) continue;
    const std::int64_t index = seen_++;
    if (index < max_lines_) {
      lines_.emplace_back(line);
    } else {
      const auto slot = uniform_below(seed_, kStreamTokenizerSample, static_cast<std::uint64_t>(index),
                                      static_cast<std::uint64_t>(index) + 1);
      if (slot < static_cast<std::uint64_t>(max_lines_)) lines_[slot].assign(line);
    }
  }
}

SentencePieceTokenizer::SentencePieceTokenizer() : impl_(std::make_unique<Impl>()) {}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load(const std::string& path) {
  DARK_CHECK(!path.empty(), "sentencepiece tokenizer: no model path given");
  return from_model_bytes(read_file(path), path);
}

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::from_model_bytes(std::string bytes,
                                                                                 const std::string& origin) {
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  sentencepiece::util::Status status;
  try {
    status = t->impl_->processor.LoadFromSerializedProto(bytes);
  } catch (const std::exception& e) {
    // Some malformed models get past the protobuf parser and make a SentencePiece internal
    // throw instead of returning a status (an empty piece: Darts' "zero-length key").
    throw Error(str("sentencepiece tokenizer: ", origin, " is not a SentencePiece model: ", e.what()));
  }
  DARK_CHECK(status.ok(), "sentencepiece tokenizer: ", origin, " is not a SentencePiece model: ", status.ToString());
  DARK_CHECK(t->impl_->processor.eos_id() >= 0, "sentencepiece tokenizer: ", origin,
             " has no end-of-sequence piece (needed to separate documents)");
  t->impl_->meta_space_ids = meta_space_byte_ids(t->impl_->processor);
  t->impl_->types = piece_types(bytes);
  const int pieces = t->impl_->processor.GetPieceSize();
  DARK_CHECK(static_cast<int>(t->impl_->types.size()) == pieces, "sentencepiece tokenizer: ", origin,
             ": could not read the type of each of its ", pieces, " pieces");
  t->hash_ = "sentencepiece-" + hex64(fnv1a64(bytes));
  t->impl_->bytes = std::move(bytes);
  return t;
}

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::train(const std::vector<std::string>& lines,
                                                                      const SentencePieceOptions& options) {
  DARK_CHECK(!lines.empty(), "sentencepiece training: no text lines to train on");
  DARK_CHECK(options.vocab_size > 259, "sentencepiece training: vocab_size ", options.vocab_size,
             " too small: 256 byte pieces and 3 special pieces come first");
  const std::unordered_map<std::string, std::string> spec = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"character_coverage", format_double(options.character_coverage)},
      {"byte_fallback", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"split_digits", "true"},
      {"allow_whitespace_only_pieces", "true"},
      {"max_sentence_length", std::to_string(LineSampler::kMaxLineBytes)},
      {"input_sentence_size", "0"},  // we sample ourselves (LineSampler)
      {"shuffle_input_sentence", "false"},
      {"num_threads", "2"},  // stored in the model bytes: fixed so the hash never depends on it
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"minloglevel", "1"},  // no per-iteration INFO logs
  };
  unsigned seed = static_cast<unsigned>(options.seed ^ (options.seed >> 32));
  if (seed == UINT_MAX) seed = 0;  // UINT_MAX asks SentencePiece for std::random_device
  sentencepiece::SetRandomGeneratorSeed(seed);
  LineIterator it(lines);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(spec, &it, &model);
  DARK_CHECK(status.ok(), "sentencepiece training failed (vocab_size ", options.vocab_size, ", ", lines.size(),
             " lines): ", status.ToString());
  return from_model_bytes(std::move(model), "the trained model");
}

void SentencePieceTokenizer::save(const std::string& path) const { write_file_atomic(path, impl_->bytes); }

const std::string& SentencePieceTokenizer::model_bytes() const { return impl_->bytes; }

std::vector<std::int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> out;
  const auto encode_part = [&](std::string_view part) {
    std::vector<int> ids;
    const auto status = impl_->processor.Encode(part, &ids);
    DARK_CHECK(status.ok(), "sentencepiece encode failed: ", status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  };
  const std::vector<int>& meta_space = impl_->meta_space_ids;
  std::size_t begin = 0;
  if (!meta_space.empty()) {
    for (std::size_t at; (at = text.find(kSpaceSymbol, begin)) != std::string_view::npos;
         begin = at + kSpaceSymbol.size()) {
      if (at > begin) encode_part(text.substr(begin, at - begin));
      out.insert(out.end(), meta_space.begin(), meta_space.end());
    }
  }
  if (begin < text.size() || begin == 0) encode_part(text.substr(begin));
  return out;
}

std::string SentencePieceTokenizer::decode(std::span<const std::int32_t> ids) const {
  const std::int32_t n = vocab_size();
  for (const std::int32_t id : ids)
    DARK_CHECK(id >= 0 && id < n, "sentencepiece decode: id ", id, " outside the vocabulary [0, ", n, ")");
  std::string text;
  const auto status = impl_->processor.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  DARK_CHECK(status.ok(), "sentencepiece decode failed: ", status.ToString());
  return text;
}

std::int32_t SentencePieceTokenizer::vocab_size() const { return impl_->processor.GetPieceSize(); }
std::int32_t SentencePieceTokenizer::eos_id() const { return impl_->processor.eos_id(); }
std::int32_t SentencePieceTokenizer::bos_id() const { return impl_->processor.bos_id(); }

std::string SentencePieceTokenizer::piece(std::int32_t id) const {
  DARK_CHECK(id >= 0 && id < vocab_size(), "sentencepiece: id ", id, " outside the vocabulary [0, ", vocab_size(),
             ")");
  return impl_->processor.IdToPiece(id);
}

float SentencePieceTokenizer::score(std::int32_t id) const {
  DARK_CHECK(id >= 0 && id < vocab_size(), "sentencepiece: id ", id, " outside the vocabulary [0, ", vocab_size(),
             ")");
  return impl_->processor.GetScore(id);
}

BpeTokenType SentencePieceTokenizer::token_type(std::int32_t id) const {
  DARK_CHECK(id >= 0 && id < vocab_size(), "sentencepiece: id ", id, " outside the vocabulary [0, ", vocab_size(),
             ")");
  return static_cast<BpeTokenType>(impl_->types[id]);
}

std::int32_t SentencePieceTokenizer::unk_id() const { return impl_->processor.unk_id(); }

}  // namespace dark::data
