// Builds the attention kernel of each layer from its settings (the run config's attention
// section with that layer's overrides applied; see train/model_builder.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "attention/random_features.h"
#include "nn/attention_kernel.h"

namespace dark::attention {

enum class Kind { softmax, performer, lfk, darkformer };
// linear: the random-feature estimate; exact: the same kernel evaluated exactly (flash
// softmax on the transformed queries and keys), to separate kernel from estimator.
enum class Mode { linear, exact };
// isotropic: omega ~ N(0, I); variance_optimal: omega ~ N(0, C*) with the density ratio split
// across both feature maps (see variance_optimal.h).
enum class Proposal { isotropic, variance_optimal };
enum class MatrixScope { head, layer };       // DARKFormer: one M per key/value head, or per layer
enum class MatrixInit { identity, whiten };  // DARKFormer: M's initial value

struct AttentionConfig {
  Kind kind = Kind::softmax;
  std::int64_t num_features = 64;            // m
  FeatureDraw draw = FeatureDraw::orthogonal;  // Performer / DARKFormer draws
  double eps = 1e-6;                         // denominator guard, offset-scaled units
  Mode mode = Mode::linear;
  Proposal proposal = Proposal::isotropic;
  std::int64_t chunk = 64;                   // causal linear-attention chunk length
  MatrixScope scope = MatrixScope::head;
  std::int64_t rank = 0;                     // rows of M; 0 = head dim (full rank)
  MatrixInit init = MatrixInit::identity;
  FeatureDraw lfk_init = FeatureDraw::orthogonal;  // LFK: the draw W starts from
  std::uint64_t seed = 0;                    // keys the feature draws (FeatureKey::seed)
};

Kind parse_kind(const std::string& name);  // "softmax" ... ; error on others
const char* kind_name(Kind kind);

// Every layer gets the same settings.
nn::AttentionFactory make_factory(const AttentionConfig& config);
// Per-layer settings.
nn::AttentionFactory make_layer_factory(std::function<AttentionConfig(int layer)> config_of_layer);

}  // namespace dark::attention
