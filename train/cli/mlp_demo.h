// The foundation's end-to-end demo: a small MLP learns a synthetic regression task (a
// fixed random "teacher" network) with plain SGD through the tape. Used by
// `darkformer demo-mlp` and by tests/test_mlp.cpp (and test_tensor.cpp's allocator check).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace dark::cli {

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

}  // namespace dark::cli
