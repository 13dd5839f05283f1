// Evaluation-time ablations of exact-window layers (see ablation.h).
#include "train/ablation.h"

#include "core/error.h"
#include "train/metrics/json_number.h"

namespace dark::train {

const char* ablation_name(Ablation ablation) {
  return ablation == Ablation::window_only ? "window_only" : "features_only";
}

Ablation parse_ablation(const std::string& text) {
  if (text == "window" || text == "window_only") return Ablation::window_only;
  if (text == "features" || text == "features_only") return Ablation::features_only;
  throw Error(str("--ablate: \"", text, "\" is not an ablation: window (the far keys get no weight) or features "
                  "(no exact window)"));
}

std::vector<attention::RandomFeatureAttention*> exact_window_layers(nn::CausalLM& model) {
  std::vector<attention::RandomFeatureAttention*> out;
  for (nn::AttentionKernel* k : model.attention_kernels())
    if (auto* rf = dynamic_cast<attention::RandomFeatureAttention*>(k); rf && rf->config().exact_window > 0)
      out.push_back(rf);
  return out;
}

AblationScope::AblationScope(nn::CausalLM& model, Ablation ablation) {
  const std::vector<attention::RandomFeatureAttention*> layers = exact_window_layers(model);
  DARK_CHECK(!layers.empty(), "ablation ", ablation_name(ablation),
             ": the model has no layer with an exact window (attention.exact_window > 0 on a performer, lfk or "
             "darkformer layer in mode linear): there is no window and no far field to take apart");
  for (attention::RandomFeatureAttention* k : layers) {
    saved_.push_back({k, k->config().exact_window, k->config().far_field});
    if (ablation == Ablation::window_only) {
      k->set_far_field(attention::FarField::none);
    } else {
      k->set_far_field(attention::FarField::features);  // a window-only model's features come back
      k->set_exact_window(0);
    }
  }
}

AblationScope::~AblationScope() {
  for (const Saved& s : saved_) {
    s.kernel->set_far_field(attention::FarField::features);  // valid at any window
    s.kernel->set_exact_window(s.exact_window);
    s.kernel->set_far_field(s.far_field);
  }
}

EvalMetrics evaluate_ablated(nn::CausalLM& model, const data::BatchSet& val, std::int64_t max_batches,
                             Ablation ablation, dist::Communicator* comm) {
  const AblationScope scope(model, ablation);
  return comm ? evaluate(model, val, max_batches, *comm) : evaluate(model, val, max_batches);
}

nlohmann::json eval_metrics_json(const EvalMetrics& m) {
  return {{"loss", metrics::finite_or_null(m.loss)},
          {"perplexity", metrics::finite_or_null(m.perplexity)},
          {"accuracy", metrics::finite_or_null(m.accuracy)},
          {"tokens", m.tokens},
          {"by_position", metrics::by_position_json(m.by_position)}};
}

}  // namespace dark::train
