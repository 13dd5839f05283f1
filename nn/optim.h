// Optimizers over a ParameterBuffer: AdamW (decoupled weight decay) and SGD (optional
// momentum). Which parameters decay is decided by glob patterns over parameter names
// (default: norms and embeddings excluded). Optimizer state is held in flat buffers
// aligned with the parameter buffer and exported per parameter for checkpoints.
#pragma once
#include <array>
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
  Optimizer(ParameterBuffer& params, OptimizerConfig config);
  // One update with learning rate lr from the gradients in the parameter buffer.
  void step(double lr);
  std::int64_t steps_taken() const { return steps_; }
  bool decays(const std::string& param_name) const;

  // State for checkpoints: "exp_avg.<param>", "exp_avg_sq.<param>" (adamw) or
  // "momentum.<param>" (sgd), plus "steps" as a one-element i64 tensor.
  std::map<std::string, Tensor> state() const;
  // Restores what state() returned; every tensor must be present with the right shape.
  void load_state(const std::map<std::string, Tensor>& state);

 private:
  ParameterBuffer& params_;
  OptimizerConfig config_;
  std::vector<bool> decay_;  // per entry
  Tensor exp_avg_, exp_avg_sq_;  // flat, like the parameter buffer (adamw; sgd uses exp_avg_ as momentum)
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
