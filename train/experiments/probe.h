// `darkformer probe`: how well each random-feature kind approximates attention in a trained
// model, layer by layer and head by head, on real validation batches (docs/method.md,
// sections 2-4). For every layer the probe records the queries (after RoPE), keys and values
// the model's own attention sees, then evaluates on them, for each feature count m and each
// of `redraws` feature draws (epochs 0, 1, ...):
//   performer           isotropic FAVOR+ (M = I)
//   darkformer_identity DARKFormer with M = I (by construction the same numbers as performer:
//                       reported because it is the finetuning start of a softmax model)
//   darkformer_whiten   M from the second moment of this layer's scaled queries and keys on
//                       `calibration_batches` training batches (attention/covariance.h)
//   performer_var_opt   performer features from the variance-optimal proposal fitted to this
//                       layer's calibration second moment (same kernel, importance-weighted)
//   darkformer_whiten_var_opt  both: whitened M, then the proposal fitted in its space
//                       (the var_opt rows are skipped, with a warning, where an eigenvalue of
//                       Lambda is >= 1/2 and the proposal does not exist)
//   darkformer_learned  the checkpoint's own M (only when the model was trained as darkformer)
//   lfk                 W from its orthogonal initial draw, or the checkpoint's learned W at
//                       the m it was trained with
// two per-token relative errors |out - ref| / |ref| (Euclidean norm over the head dimension):
//   monte_carlo: ref = the exact attention of the SAME kernel (exp(q~ . k~) for performer,
//                exp(q~^T M^T M k~) for darkformer): the estimator's error alone (the paper's
//                importance-sampling argument); undefined for lfk, which has no fixed kernel;
//   swap:        ref = the layer's exact softmax attention: what replacing the attention costs.
// With an exact window W > 0 (ProbeOptions::exact_window; attention/exact_window.h) every
// estimator is measured a second time, the same kernel object (features, M, proposal, draws)
// with its W nearest keys weighted exactly: the rows "<method> +windowW", beside "<method>".
// Errors are heavy-tailed, so the report gives the mean and the median, 90th and 99th
// percentiles over every (batch, position, head, draw), and draw_sd, the standard deviation
// over draws of the per-draw mean Monte Carlo error.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/prepare.h"
#include "nn/model.h"
#include "train/config.h"

namespace dark::experiments {

struct ProbeOptions {
  std::int64_t batches = 2;  // validation batches (of training.batch_size windows)
  std::vector<std::int64_t> features = {16, 32, 64, 128, 256};
  std::int64_t redraws = 8;
  std::int64_t calibration_batches = 2;  // training batches for darkformer_whiten
  int exact_window = 0;                  // W > 0: each estimator also with an exact window of W keys
};

struct ErrorStats {
  double mean = 0, median = 0, p90 = 0, p99 = 0;
  std::int64_t count = 0;
};
// Mean and nearest-rank percentiles of `errors` (which it sorts).
ErrorStats error_stats(std::vector<double>& errors);

struct ProbeRow {
  int layer = -1;  // -1: pooled over layers
  int head = -1;   // -1: pooled over heads
  std::string method;
  std::int64_t features = 0;
  bool has_monte_carlo = false;
  ErrorStats monte_carlo, swap;
  double draw_sd = 0;
};

struct ProbeReport {
  std::vector<ProbeRow> rows;  // per (layer, method, m): pooled over heads, then per head; then pooled over layers
  nlohmann::json to_json() const;
  std::string table() const;   // the pooled-over-heads rows, per layer and over all layers
};

// `model` in eval mode with the checkpoint's weights; `config` its resolved run config.
ProbeReport run_probe(nn::CausalLM& model, const train::RunConfig& config, const data::PreparedData& data,
                      const ProbeOptions& options);

}  // namespace dark::experiments
