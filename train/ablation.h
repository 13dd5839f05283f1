// What each part of an exact-window model carries: evaluation-time ablations of the layers
// whose random-feature attention has an exact window (attention.exact_window W > 0;
// docs/method.md, "The exact window"):
//   window_only    the far keys get no weight (attention.far_field none): each such layer is
//                  sliding-window attention over its W nearest keys with the kind's exact kernel;
//   features_only  no window (exact_window 0): the kind's random features over every key.
// The other layers (softmax, Gemma 3's local layers kept exact) are left as they are. Nothing
// is learned or redrawn: the same weights and features, one part switched off. The loss by
// position (train/metrics/by_position.h) then says where each part matters: past the window,
// window_only's loss is what the model loses without the far field.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention/random_feature_attention.h"
#include "train/evaluate.h"

namespace dark::train {

enum class Ablation { window_only, features_only };

// "window_only", "features_only": the names in metrics.jsonl and the report.
const char* ablation_name(Ablation ablation);
// `darkformer eval --ablate`'s values: window or features (the full names are accepted too).
Ablation parse_ablation(const std::string& text);

// The model's layers an ablation changes: random-feature layers with an exact window.
std::vector<attention::RandomFeatureAttention*> exact_window_layers(nn::CausalLM& model);

// Puts an ablation in force on every exact-window layer while it lives, and restores each
// layer's window and far field after (also when the evaluation throws). A model without an
// exact-window layer is an error naming what is needed.
class AblationScope {
 public:
  AblationScope(nn::CausalLM& model, Ablation ablation);
  ~AblationScope();
  AblationScope(const AblationScope&) = delete;
  AblationScope& operator=(const AblationScope&) = delete;

 private:
  struct Saved {
    attention::RandomFeatureAttention* kernel;
    int exact_window;
    attention::FarField far_field;
  };
  std::vector<Saved> saved_;
};

// evaluate() under the ablation (comm null: one process).
EvalMetrics evaluate_ablated(nn::CausalLM& model, const data::BatchSet& val, std::int64_t max_batches,
                             Ablation ablation, dist::Communicator* comm = nullptr);

// An evaluation as one object of metrics.jsonl's "eval_ablation": {"loss", "perplexity",
// "accuracy", "tokens", "by_position"}.
nlohmann::json eval_metrics_json(const EvalMetrics& m);

}  // namespace dark::train
