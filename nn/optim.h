// Optimizers over a ParameterBuffer: AdamW (decoupled weight decay) and SGD (optional
// momentum). Which parameters decay is decided by glob patterns over parameter names
// (default: norms and embeddings excluded). Optimizer state is held in flat buffers
// aligned with the parameter buffer and exported per parameter for checkpoints.
//
// ZeRO stage 1: an optimizer given a shard (a FlatRange of the parameter buffer, usually
// ParameterBuffer::shard(rank)) keeps state for that range only and updates only the
// parameter elements in it, reading the gradients at the same offsets; a parameter cut by
// a shard boundary is updated on both sides by the two optimizers. Each element gets the
// same arithmetic as in an unsharded optimizer, so the shards' results put together equal
// its results bit for bit. Checkpoints always hold the full state (state() gathers it),
// so they do not depend on the number of shards.
#pragma once
#include <array>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/enum_names.h"
#include "nn/parameter_buffer.h"

namespace dark::nn {

enum class OptimizerKind { adamw, sgd };

// The optimizer section of a run config, owned here; the run config's schema binds its rows
// to these members ("optimizer.lr" is lr).
struct OptimizerConfig {
  OptimizerKind name = OptimizerKind::adamw;
  double lr = 3e-4;                           // peak learning rate (the schedule scales it per step)
  std::array<double, 2> betas = {0.9, 0.95};  // AdamW moment decay rates
  double eps = 1e-8;                          // AdamW denominator epsilon
  double weight_decay = 0.1;                  // decoupled weight decay
  double momentum = 0.0;                      // SGD momentum (sgd only)
  // Parameter-name glob patterns that get no weight decay.
  // The attention feature maps (DARKFormer's M, LFK's W) are excluded too: decaying M toward 0
  // flattens the kernel toward uniform attention instead of regularising toward Performer.
  std::vector<std::string> no_decay = {"*norm*", "*embed_tokens*", "*feature_map*"};
  double grad_clip = 1.0;  // max global gradient L2 norm; 0 = off (applied by the trainer, see clip_factor)
};

// The factor that brings a global gradient norm down to max_norm (1 when it is within it or
// clipping is off).
double clip_factor(double grad_norm, double max_norm);

// True when name matches one of the glob patterns (fnmatch: *, ?, [...]).
bool matches_any(const std::string& name, const std::vector<std::string>& patterns);

class Optimizer {
 public:
  // shard: the range of params' flat buffers this optimizer owns; empty (the default) means
  // all of it, [0, params.numel()).
  Optimizer(ParameterBuffer& params, OptimizerConfig config, FlatRange shard = {});
  // One update with learning rate lr from the gradients in the parameter buffer (of the
  // parameter elements in shard() only).
  void step(double lr);
  std::int64_t steps_taken() const { return steps_; }
  bool decays(const std::string& param_name) const;
  FlatRange shard() const { return shard_; }
  // True when shard() is not the whole parameter buffer.
  bool sharded() const { return shard_.size() != params_.numel(); }
  // Bytes of optimizer state this optimizer holds (its shard's).
  std::int64_t state_bytes() const;

  // State for checkpoints: "exp_avg.<param>", "exp_avg_sq.<param>" (adamw) or
  // "momentum.<param>" (sgd), each with its parameter's shape, plus "steps" as a
  // one-element i64 tensor; the same whatever the shard. A sharded optimizer needs gather:
  // given one of its flat state buffers (f32, shard().size() elements) it returns the full
  // buffer (f32, params.numel() elements; every rank's shard in place, as an all-gather
  // gives it). It is called once per state buffer (exp_avg, then exp_avg_sq), and not at all
  // when the optimizer is not sharded.
  std::map<std::string, Tensor> state(const std::function<Tensor(const Tensor&)>& gather = {}) const;
  // Restores what state() returned (the full state; a sharded optimizer takes its shard's
  // part); every tensor must be present with the right shape and dtype.
  void load_state(const std::map<std::string, Tensor>& state);

 private:
  ParameterBuffer& params_;
  OptimizerConfig config_;
  FlatRange shard_;
  std::vector<bool> decay_;  // per entry
  // Flat, like shard_ of the parameter buffer (adamw; sgd uses exp_avg_ as momentum).
  Tensor exp_avg_, exp_avg_sq_;
  Tensor decay_ranges_;  // (R, 2) i64 on the buffers' device: the shard's decayed ranges, from its start
  std::int64_t steps_ = 0;
};

}  // namespace dark::nn

namespace dark {
template <>
struct EnumNames<nn::OptimizerKind> {
  static constexpr std::array<std::pair<nn::OptimizerKind, std::string_view>, 2> table{
      {{nn::OptimizerKind::adamw, "adamw"}, {nn::OptimizerKind::sgd, "sgd"}}};
};
}  // namespace dark
