// Feature epochs, calibration and attention state (see attention_state.h).
#include "train/attention_state.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "autograd/grad_mode.h"

namespace dark::train {

namespace {
std::string feature_map_prefix(std::size_t layer) {
  return "model.layers." + std::to_string(layer) + ".self_attn.feature_map.";
}
}  // namespace

std::vector<std::int64_t> redraw_intervals(const RunConfig& config) {
  std::vector<std::int64_t> out;
  for (int layer = 0; layer < config.model.n_layers; ++layer) out.push_back(attention_for_layer(config, layer).redraw_interval);
  return out;
}

void set_feature_epochs(nn::CausalLM& model, const std::vector<std::int64_t>& intervals, std::int64_t step) {
  const auto kernels = model.attention_kernels();
  for (std::size_t i = 0; i < kernels.size(); ++i)
    kernels[i]->set_feature_epoch(intervals[i] > 0 ? step / intervals[i] : 0);
}

bool features_redrawn_at(nn::CausalLM& model, const std::vector<std::int64_t>& intervals, std::int64_t step) {
  const auto kernels = model.attention_kernels();
  for (std::size_t i = 0; i < kernels.size(); ++i)
    if (kernels[i]->redraws_features() && intervals[i] > 0 && step > 0 && step % intervals[i] == 0) return true;
  return false;
}

std::vector<std::int64_t> redrawing_feature_epochs(nn::CausalLM& model) {
  std::vector<std::int64_t> out;
  for (nn::AttentionKernel* k : model.attention_kernels())
    if (k->redraws_features()) out.push_back(k->feature_epoch());
  return out;
}

void request_attention_stats(nn::CausalLM& model) {
  for (nn::AttentionKernel* k : model.attention_kernels()) k->request_stats();
}

bool attention_stats_requested(nn::CausalLM& model) {
  const auto kernels = model.attention_kernels();
  return std::any_of(kernels.begin(), kernels.end(), [](nn::AttentionKernel* k) { return k->stats_requested(); });
}

std::vector<nn::AttentionStats> take_attention_stats(nn::CausalLM& model) {
  std::vector<nn::AttentionStats> out;
  for (nn::AttentionKernel* k : model.attention_kernels())
    if (auto s = k->take_stats()) out.push_back(*s);
  return out;
}

void calibrate_attention(nn::CausalLM& model, const RunConfig& config, const data::BatchSource& loader) {
  std::vector<nn::AttentionKernel*> needing;
  int batches = 0;
  const auto kernels = model.attention_kernels();
  for (std::size_t i = 0; i < kernels.size(); ++i)
    if (kernels[i]->needs_calibration()) {
      needing.push_back(kernels[i]);
      batches = std::max(batches, attention_for_layer(config, static_cast<int>(i)).calibration_batches);
    }
  if (needing.empty()) return;
  spdlog::info("calibrating attention of {} layer(s) on {} training batch(es)", needing.size(), batches);
  NoGradGuard no_grad;
  model.train(false);
  for (nn::AttentionKernel* k : needing) k->begin_calibration();
  for (int b = 0; b < batches; ++b) {
    const Tensor tokens = loader.batch(b);
    model.forward(core::slice(tokens, 1, 0, tokens.size(1) - 1).contiguous());
  }
  for (nn::AttentionKernel* k : needing) k->end_calibration();
  model.train(true);
}

std::map<std::string, Tensor> attention_state_map(nn::CausalLM& model) {
  std::map<std::string, Tensor> out;
  const auto kernels = model.attention_kernels();
  for (std::size_t i = 0; i < kernels.size(); ++i)
    for (auto& [name, t] : kernels[i]->extra_state()) out[feature_map_prefix(i) + name] = t.to(Device::cpu());
  return out;
}

void load_attention_state(nn::CausalLM& model, const std::map<std::string, Tensor>& saved) {
  const auto kernels = model.attention_kernels();
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    const std::string prefix = feature_map_prefix(i);
    std::map<std::string, Tensor> mine;
    for (const auto& [name, t] : saved)
      if (name.rfind(prefix, 0) == 0) mine[name.substr(prefix.size())] = t;
    kernels[i]->load_extra_state(mine);
  }
}

}  // namespace dark::train
