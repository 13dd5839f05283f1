// MQAR sequences and batches (see mqar.h).
#include "data/mqar.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "data/hash.h"

namespace dark::data {
// Helpers, in a namespace of their own (the unity build compiles this file with others).
namespace mqar_impl {

constexpr std::uint64_t kStreamMqarPairs = 0x6d71617200000002ull;  // "mqar" + 2: training sequences' pairs counts
constexpr int kDrawBits = 24;                                      // draws per sequence < 2^24
constexpr std::int64_t kMaxIndex = std::int64_t{1} << (64 - kDrawBits);

// The draws of one sequence: draw d is Philox block (seed, stream, index * 2^24 + d).
class Draws {
 public:
  Draws(std::uint64_t seed, std::uint64_t stream, std::int64_t index)
      : seed_(seed), stream_(stream), base_(static_cast<std::uint64_t>(index) << kDrawBits) {}
  // Uniform in [0, n).
  std::int64_t below(std::int64_t n) {
    DARK_CHECK(next_ < (std::uint64_t{1} << kDrawBits), "mqar: more than 2^24 draws in one sequence");
    return static_cast<std::int64_t>(uniform_below(seed_, stream_, base_ + next_++, static_cast<std::uint64_t>(n)));
  }
  // Uniform in [0, 1) with 53 bits.
  double unit() { return static_cast<double>(below(std::int64_t{1} << 53)) * 0x1p-53; }

 private:
  std::uint64_t seed_, stream_, base_, next_ = 0;
};

std::int32_t marked(std::int32_t id) { return -(id + 1); }

}  // namespace mqar_impl

std::int32_t mqar_keys(std::int32_t vocab) { return (vocab - 1) / 2; }

std::string mqar_config_problem(const MqarConfig& config, std::int64_t seq_len) {
  if (config.vocab < 3)
    return str("data.mqar.vocab: ", config.vocab, " is too small: the filler, at least one key and one value need 3");
  if (config.pairs.empty()) return "data.mqar.pairs: is empty: give at least one number of key-value pairs";
  if (!(config.power > 0)) return str("data.mqar.power: ", config.power, " must be > 0");
  const std::int32_t keys = mqar_keys(config.vocab);
  for (std::size_t i = 0; i < config.pairs.size(); ++i) {
    const std::int64_t m = config.pairs[i];
    if (m < 1) return str("data.mqar.pairs[", i, "]: ", m, " must be >= 1");
    if (m > keys)
      return str("data.mqar.pairs[", i, "]: ", m, " pairs need ", m, " distinct keys, but data.mqar.vocab ", config.vocab,
                 " has ", keys, " (keys are 1..(vocab - 1) / 2)");
    if (4 * m > seq_len + 1)
      return str("data.mqar.pairs[", i, "]: ", m, " pairs take ", 2 * m, " tokens and their ", m,
                 " queries (a key and its value each) another ", 2 * m, ": ", 4 * m,
                 " tokens do not fit in a sequence of data.seq_len + 1 = ", seq_len + 1,
                 " (at most ", (seq_len + 1) / 4, " pairs)");
  }
  return "";
}

MqarSequence mqar_sequence(const MqarConfig& config, std::int64_t seq_len, std::uint64_t seed, std::uint64_t stream,
                           std::int64_t index, std::int64_t pairs) {
  MqarConfig one = config;
  one.pairs = {pairs};
  if (const std::string problem = mqar_config_problem(one, seq_len); !problem.empty()) throw Error("mqar: " + problem);
  DARK_CHECK(index >= 0 && index < mqar_impl::kMaxIndex, "mqar: sequence index ", index, " is outside 0..2^40 - 1");
  mqar_impl::Draws draw(seed, stream, index);
  const std::int64_t n = seq_len + 1, m = pairs;
  const std::int32_t keys = mqar_keys(config.vocab), values = config.vocab - 1 - keys;

  // m distinct keys: the first m of a partial Fisher-Yates shuffle of 1..K.
  std::vector<std::int32_t> key_pool(static_cast<std::size_t>(keys));
  std::iota(key_pool.begin(), key_pool.end(), 1);
  for (std::int64_t i = 0; i < m; ++i) std::swap(key_pool[i], key_pool[i + draw.below(keys - i)]);
  std::vector<std::int32_t> value_of(static_cast<std::size_t>(m));
  for (std::int32_t& v : value_of) v = keys + 1 + static_cast<std::int32_t>(draw.below(values));

  MqarSequence s;
  s.pairs = m;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n), 0);
  std::vector<bool> scored(static_cast<std::size_t>(n), false);
  for (std::int64_t i = 0; i < m; ++i) ids[2 * i] = key_pool[i], ids[2 * i + 1] = value_of[i];

  // m of the S query slots, without replacement, with weight (s + 1)^(power - 1).
  const std::int64_t slots = (n - 2 * m) / 2;
  std::vector<double> weight(static_cast<std::size_t>(slots));
  for (std::int64_t q = 0; q < slots; ++q) weight[q] = std::pow(static_cast<double>(q + 1), config.power - 1.0);
  std::vector<std::int64_t> chosen;
  for (std::int64_t i = 0; i < m; ++i) {
    double total = 0;
    for (const double w : weight) total += w;
    const double u = draw.unit() * total;
    double below = 0;
    std::int64_t pick = -1;
    for (std::int64_t q = 0; q < slots; ++q) {
      if (weight[q] == 0) continue;
      pick = q;  // the last open slot, should rounding carry u past every one
      below += weight[q];
      if (u < below) break;
    }
    chosen.push_back(pick);
    weight[pick] = 0;
  }
  std::sort(chosen.begin(), chosen.end());
  // Which pair each chosen slot queries: a uniformly random order of the m pairs.
  std::vector<std::int64_t> order(static_cast<std::size_t>(m));
  std::iota(order.begin(), order.end(), 0);
  for (std::int64_t i = m - 1; i > 0; --i) std::swap(order[i], order[draw.below(i + 1)]);
  for (std::int64_t i = 0; i < m; ++i) {
    const std::int64_t pair = order[i], query = 2 * m + 2 * chosen[i];
    ids[query] = key_pool[pair];
    ids[query + 1] = value_of[pair];
    scored[query + 1] = true;
    s.targets.push_back({query + 1, key_pool[pair], value_of[pair], query - 2 * pair});
  }
  s.tokens.resize(static_cast<std::size_t>(n));
  for (std::int64_t t = 0; t < n; ++t) s.tokens[t] = scored[t] ? ids[t] : mqar_impl::marked(ids[t]);
  return s;
}

std::int64_t mqar_train_pairs(const MqarConfig& config, std::uint64_t seed, std::int64_t index) {
  DARK_CHECK(!config.pairs.empty(), "mqar: data.mqar.pairs is empty");
  const auto i = uniform_below(seed, mqar_impl::kStreamMqarPairs, static_cast<std::uint64_t>(index), config.pairs.size());
  return config.pairs[i];
}

namespace mqar_impl {
Tensor rows_tensor(const std::vector<const MqarSequence*>& rows, std::int64_t seq_len, Device device) {
  std::vector<std::int32_t> flat;
  flat.reserve(rows.size() * static_cast<std::size_t>(seq_len + 1));
  for (const MqarSequence* s : rows) flat.insert(flat.end(), s->tokens.begin(), s->tokens.end());
  return Tensor::from_vector(flat, {static_cast<std::int64_t>(rows.size()), seq_len + 1}).to(device);
}
}  // namespace mqar_impl

MqarTrainSource::MqarTrainSource(MqarConfig config, std::int64_t batch_size, std::int64_t seq_len, std::uint64_t seed,
                                 Device device)
    : config_(std::move(config)), batch_size_(batch_size), seq_len_(seq_len), seed_(seed), device_(device) {
  DARK_CHECK(batch_size_ >= 1, "mqar: batch_size must be >= 1, got ", batch_size_);
  if (const std::string problem = mqar_config_problem(config_, seq_len_); !problem.empty())
    throw Error("config: " + problem);
}

Tensor MqarTrainSource::batch(std::int64_t index) const {
  DARK_CHECK(index >= 0, "mqar: batch index ", index, " is negative");
  std::vector<MqarSequence> rows;
  std::vector<const MqarSequence*> pointers;
  for (std::int64_t r = 0; r < batch_size_; ++r) {
    const std::int64_t n = index * batch_size_ + r;
    rows.push_back(mqar_sequence(config_, seq_len_, seed_, kStreamMqarTrain, n, mqar_train_pairs(config_, seed_, n)));
  }
  for (const MqarSequence& s : rows) pointers.push_back(&s);
  return mqar_impl::rows_tensor(pointers, seq_len_, device_);
}

MqarValidationSet::MqarValidationSet(MqarConfig config, std::int64_t batch_size, std::int64_t seq_len, Device device)
    : config_(std::move(config)), batch_size_(batch_size), seq_len_(seq_len), device_(device) {
  DARK_CHECK(batch_size_ >= 1, "mqar: batch_size must be >= 1, got ", batch_size_);
  DARK_CHECK(config_.val_sequences >= 1, "config: data.mqar.val_sequences: must be >= 1, got ", config_.val_sequences);
  if (const std::string problem = mqar_config_problem(config_, seq_len_); !problem.empty())
    throw Error("config: " + problem);
  const auto kinds = static_cast<std::int64_t>(config_.pairs.size());
  for (std::int64_t k = 0; k < config_.val_sequences; ++k)
    sequences_.push_back(mqar_sequence(config_, seq_len_, config_.val_seed, kStreamMqarVal, k, config_.pairs[k % kinds]));
}

std::int64_t MqarValidationSet::num_batches() const {
  return (num_windows() + batch_size_ - 1) / batch_size_;
}

std::vector<const MqarSequence*> MqarValidationSet::sequences(std::int64_t index) const {
  DARK_CHECK(index >= 0 && index < num_batches(), "mqar: validation batch ", index, " is outside 0..", num_batches() - 1);
  std::vector<const MqarSequence*> out;
  const std::int64_t end = std::min(num_windows(), (index + 1) * batch_size_);
  for (std::int64_t k = index * batch_size_; k < end; ++k) out.push_back(&sequences_[k]);
  return out;
}

Tensor MqarValidationSet::batch(std::int64_t index) const {
  return mqar_impl::rows_tensor(sequences(index), seq_len_, device_);
}

}  // namespace dark::data
