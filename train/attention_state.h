// What the trainer does with a model's attention kernels beyond forward and backward:
// random-feature epochs (redraws), calibration before the first step, and the untrained
// attention state that checkpoints keep.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/loader.h"
#include "nn/model.h"
#include "train/config.h"

namespace dark::train {

// Each layer's attention.redraw_interval (its overrides applied): read once per run, since
// resolving overrides goes through the config schema.
std::vector<std::int64_t> redraw_intervals(const RunConfig& config);

// Random features are a function of (seed, layer, head, epoch) with epoch = step / interval:
// every rank, and a resumed run, draws the same matrices at the same step.
void set_feature_epochs(nn::CausalLM& model, const std::vector<std::int64_t>& intervals, std::int64_t step);

// Whether optimizer step `step` (0-based) is the first of a new feature epoch in a layer whose
// output a new epoch changes (a redraw; lfk, softmax and exact mode never redraw).
bool features_redrawn_at(nn::CausalLM& model, const std::vector<std::int64_t>& intervals, std::int64_t step);

// The feature epochs of the layers whose output a new epoch changes (what a captured step
// graph depends on besides its inputs: train/step_graph.h).
std::vector<std::int64_t> redrawing_feature_epochs(nn::CausalLM& model);

// The attention statistics (nn::AttentionStats) of the next forward pass, every layer: request
// before it, take after (one entry per layer; empty when no forward pass ran).
void request_attention_stats(nn::CausalLM& model);
bool attention_stats_requested(nn::CausalLM& model);
std::vector<nn::AttentionStats> take_attention_stats(nn::CausalLM& model);

// DARKFormer's whiten initialisation and the variance-optimal proposal measure the queries
// and keys of the first attention.calibration_batches training batches (eval mode, no
// gradient) before the first step of a fresh run. Does nothing when no layer needs it.
void calibrate_attention(nn::CausalLM& model, const RunConfig& config, const data::BatchSource& loader);

// The kernels' untrained state by checkpoint name ("model.layers.<i>.self_attn.feature_map.<name>"),
// on the CPU, and back.
std::map<std::string, Tensor> attention_state_map(nn::CausalLM& model);
void load_attention_state(nn::CausalLM& model, const std::map<std::string, Tensor>& saved);

}  // namespace dark::train
