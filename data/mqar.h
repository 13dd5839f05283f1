// Multi-query associative recall (MQAR; Zoology, Arora et al. 2023, arXiv 2312.04927) as a
// synthetic data source: a model trained from scratch must recall, for each queried key, the
// value that followed it earlier in the sequence.
//
// Vocabulary of V ids: 0 is the filler; keys are 1..K with K = (V - 1) / 2; values are
// K + 1..V - 1 (disjoint from the keys, at least K of them). A sequence of n = seq_len + 1
// tokens (a batch row: the model reads the first seq_len, predicts the last seq_len) with m
// pairs is
//   k_1 v_1 k_2 v_2 ... k_m v_m | query section of n - 2m tokens
// with m distinct keys (uniform, without replacement) and values uniform with replacement.
// The query section is S = floor((n - 2m) / 2) slots of two tokens; m of them, chosen without
// replacement with weight (s + 1)^(power - 1) for slot s = 0..S-1 (a power law in the gap
// after the pairs, Zoology's power_a: 0.01 puts most queries early, 1 is uniform), hold a key
// followed by its value, the keys in a uniformly random order; every other token is the
// filler. So each key is queried exactly once, and n >= 4m is needed.
//
// Only the query section's values are scored: the model sees the query key and must predict
// its value. Every other entry of the row is marked unscored in band, -(id + 1) (nn/model.h),
// so the loss and the evaluation count exactly the m recalls. For the evaluation each scored
// target also carries the number of pairs of its sequence and its query-key distance: the
// position of the query key minus the position of the key's first occurrence (its pair).
//
// A sequence is a pure function of (seed, stream, index) (Philox, data/hash.h): the training
// stream and the validation stream never meet, a resumed run reads the same batches, and a
// validation set is the same on every machine.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/batches.h"

namespace dark::data {

// The data.mqar section of a run config (data.task "mqar").
struct MqarConfig {
  std::vector<std::int64_t> pairs = {4, 8, 16, 32, 64};  // key-value pairs per sequence: each sequence takes one of these
  int vocab = 8192;                // V (Zoology's default); keys 1..(V-1)/2, values above, 0 the filler
  double power = 0.01;             // query slots drawn with weight (s + 1)^(power - 1) (Zoology's power_a)
  int val_sequences = 500;         // validation sequences, equal shares of each pairs count
  std::uint64_t val_seed = 1;      // the validation sequences' seed (the run's seed keys the training ones)
};

inline constexpr std::uint64_t kStreamMqarTrain = 0x6d71617200000000ull;  // "mqar" + 0
inline constexpr std::uint64_t kStreamMqarVal = 0x6d71617200000001ull;    // "mqar" + 1

// The keys of a vocabulary (K above); values are the ids above them.
std::int32_t mqar_keys(std::int32_t vocab);

// Why `config` cannot make sequences of seq_len + 1 tokens ("" when it can): the first
// impossible setting, naming its key ("data.mqar.pairs: 80 pairs need ... "). parse_config
// reports it as a config error.
std::string mqar_config_problem(const MqarConfig& config, std::int64_t seq_len);

struct MqarTarget {
  std::int64_t position = 0;  // index in the row of the scored value token (its query key is at position - 1)
  std::int32_t key = 0, value = 0;
  std::int64_t distance = 0;  // (position - 1) - the index of the key in the pair section
};

struct MqarSequence {
  std::vector<std::int32_t> tokens;  // seq_len + 1 entries, unscored ones marked -(id + 1)
  std::int64_t pairs = 0;            // m
  std::vector<MqarTarget> targets;   // the m scored values, in position order
};

// The sequence `index` of (seed, stream) with `pairs` pairs, of seq_len + 1 tokens. Throws
// when mqar_config_problem() would complain about (pairs, vocab, power, seq_len).
MqarSequence mqar_sequence(const MqarConfig& config, std::int64_t seq_len, std::uint64_t seed, std::uint64_t stream,
                           std::int64_t index, std::int64_t pairs);

// The pairs count of training sequence `index`: uniform over config.pairs, from Philox.
std::int64_t mqar_train_pairs(const MqarConfig& config, std::uint64_t seed, std::int64_t index);

// Training batches: row r of batch i is training sequence i * batch_size + r (seed, stream
// kStreamMqarTrain) with mqar_train_pairs pairs.
class MqarTrainSource : public BatchSource {
 public:
  MqarTrainSource(MqarConfig config, std::int64_t batch_size, std::int64_t seq_len, std::uint64_t seed, Device device);
  Tensor batch(std::int64_t index) const override;

 private:
  MqarConfig config_;
  std::int64_t batch_size_, seq_len_;
  std::uint64_t seed_;
  Device device_;
};

// The validation set: sequence k (k < val_sequences) of (val_seed, kStreamMqarVal) has
// pairs[k mod P] pairs, so every pairs count gets an equal share (within one); batches of
// batch_size rows in sequence order, the last possibly shorter. Built once, held on the host.
class MqarValidationSet : public BatchSet {
 public:
  MqarValidationSet(MqarConfig config, std::int64_t batch_size, std::int64_t seq_len, Device device);
  std::int64_t num_batches() const override;
  Tensor batch(std::int64_t index) const override;
  std::int64_t num_windows() const override { return static_cast<std::int64_t>(sequences_.size()); }
  // The sequences of batch `index`, its rows in order.
  std::vector<const MqarSequence*> sequences(std::int64_t index) const;
  const MqarConfig& config() const { return config_; }

 private:
  MqarConfig config_;
  std::int64_t batch_size_, seq_len_;
  Device device_;
  std::vector<MqarSequence> sequences_;
};

}  // namespace dark::data
