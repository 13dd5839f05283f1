// Optimizers over a ParameterBuffer: AdamW (decoupled weight decay) and SGD (optional
// momentum). Which parameters decay is decided by glob patterns over parameter names
// (default: norms and embeddings excluded). Optimizer state is held in flat buffers
// aligned with the parameter buffer and exported per parameter for checkpoints.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "nn/parameter_buffer.h"

namespace dark::nn {

struct OptimizerConfig {
  std::string name = "adamw";  // adamw | sgd
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
  double momentum = 0.0;  // sgd only
  std::vector<std::string> no_decay = {"*norm*", "*embed_tokens*"};
};

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
