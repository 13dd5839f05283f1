// The foundation's end-to-end demo: a small MLP learns a synthetic regression task (a
// fixed random "teacher" network) with plain SGD through the tape. Used by
// `darkformer demo-mlp` (the quickstart until pretraining lands) and by tests/test_mlp.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace dark {

struct MlpDemoConfig {
  int steps = 2000;
  int batch_size = 64;
  int input_dim = 8;
  int hidden_dim = 64;
  double learning_rate = 0.3;
  std::uint64_t seed = 0;
};

struct MlpDemoResult {
  std::vector<double> losses;  // training loss per step
  double initial_eval_loss = 0;
  double final_eval_loss = 0;  // on a held-out batch
};

// Calls `progress(step, loss)` after every step when given.
MlpDemoResult run_mlp_demo(const MlpDemoConfig& config,
                           const std::function<void(int, double)>& progress = nullptr);

}  // namespace dark
