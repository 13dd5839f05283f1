// The attention section of a run config, owned here: the kinds and their options, with the
// spelling of every enumeration (EnumNames), and the rules between keys (validate). The run
// config's schema (train/config.cpp) binds its rows to these members directly: a member's
// path below AttentionConfig is its JSON key below "attention" (chunk_size is
// "attention.chunk_size", darkformer.rank is "attention.darkformer.rank").
//
// Adding an attention kind: an enumerator in Kind and a row in EnumNames<Kind>, its class in
// attention/, a case in factory.cpp, and (when it has options of its own) a settings struct
// here plus one schema row per option in train/config.cpp. See README.md, "Contributing".
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention/random_features.h"
#include "core/enum_names.h"

namespace dark::attention {

enum class Kind { softmax, performer, lfk, darkformer };
// linear: the random-feature estimate; exact: the same kernel evaluated exactly (flash
// softmax on the transformed queries and keys), to separate kernel from estimator.
enum class Mode { linear, exact };
// isotropic: omega ~ N(0, I); variance_optimal: omega ~ N(0, C*) with the density ratio split
// across both feature maps (see variance_optimal.h).
enum class Proposal { isotropic, variance_optimal };
enum class MatrixScope { head, layer };      // DARKFormer: one M per key/value head, or per layer
enum class MatrixInit { identity, whiten };  // DARKFormer: M's initial value
// What a sliding-window layer (Gemma 3's local layers) runs when the kind is not softmax:
// softmax = exact windowed softmax, so swapping the attention replaces the global layers
// only; same = the configured kind (windowed random-feature attention: linear_attention with
// a window, autograd/ops.h; CPU and CUDA kernels).
enum class WindowedLayers { softmax, same };
// What an exact-window layer (exact_window > 0) does with the keys beyond its window:
// features = the kind's random-feature estimate (the exact window as designed); none = nothing,
// the far keys get no weight: the layer is sliding-window attention over its W nearest keys
// with the kind's exact kernel ("window only", the control arm that shows what the window
// alone carries; in training and decoding as in evaluation).
enum class FarField { features, none };

struct DarkformerSettings {
  MatrixScope scope = MatrixScope::head;  // one M per (layer, kv head), or one per layer shared by its heads
  int rank = 0;                           // rows of M (r x d); 0 = full rank d; must be <= head dim
  MatrixInit init = MatrixInit::identity; // identity = exactly Performer with the same features; whiten = from calibration covariance
};

struct LfkSettings {
  FeatureDraw init = FeatureDraw::orthogonal;  // how W (m x d) starts: a Performer draw of that kind
};

// attention.layers: a layer ("3") or inclusive range ("0-1") and the attention keys it sets
// (already validated by the schema), e.g. {"kind": "softmax"}.
struct LayerOverride {
  int first = 0, last = 0;
  nlohmann::json settings;
};

struct AttentionConfig {
  Kind kind = Kind::softmax;
  int num_features = 64;                       // m, random features per head; >= 1
  FeatureDraw draw = FeatureDraw::orthogonal;  // Performer / DARKFormer draws
  std::int64_t redraw_interval = 1000;         // optimizer steps between feature redraws in training; 0 = never
  double eps = 1e-6;                           // denominator guard (> 0), in offset-scaled units
  Mode mode = Mode::linear;
  Proposal proposal = Proposal::isotropic;
  int chunk_size = 64;           // causal linear-attention chunk length, >= 1
  int calibration_batches = 4;   // training batches measured for darkformer.init=whiten and proposal=variance_optimal
  WindowedLayers windowed_layers = WindowedLayers::softmax;  // sliding-window layers: exact softmax, or this kind
  // The exact window W (attention/exact_window.h): each query's W nearest keys get the
  // kernel's exact weight, the rest its random-feature estimate, in one normaliser; 0 = none.
  int exact_window = 0;
  FarField far_field = FarField::features;  // the keys beyond the exact window: random features, or none
  // A learned per-query-head balance between the window and the features (LoLCATs' window
  // factor): the far keys' weights times exp(b_h), b_h a parameter (feature_map.window_balance)
  // starting at 0, where the estimator is unbiased; needs the exact window.
  bool window_balance = false;
  DarkformerSettings darkformer;
  LfkSettings lfk;
  std::vector<LayerOverride> layers;  // per-layer overrides (resolved per layer by the run config)

  // Not a config key: keys the feature draws (FeatureKey::seed); the model builder sets it
  // from the run's seed.
  std::uint64_t seed = 0;
};

// The rules between attention keys, on one layer's effective settings:
//   darkformer.rank <= head dimension;
//   mode "exact" not with kind lfk (LFK learns its feature map: there is no fixed kernel);
//   proposal "variance_optimal" only with kind performer or darkformer (LFK learns its
//   features, softmax has none) and only with mode "linear" (exact attention draws none);
//   exact_window > 0 only with a random-feature kind in mode "linear";
//   far_field "none" only with exact_window > 0 (without a window it leaves no key);
//   window_balance only with exact_window > 0 and far_field "features" (it weighs the two).
// Errors read "config: PREFIX.KEY: ...", PREFIX being "attention" or a per-layer override's path.
void validate(const AttentionConfig& config, std::int64_t head_dim, const std::string& prefix = "attention");

}  // namespace dark::attention

namespace dark {
template <>
struct EnumNames<attention::Kind> {
  static constexpr std::array<std::pair<attention::Kind, std::string_view>, 4> table{
      {{attention::Kind::softmax, "softmax"},
       {attention::Kind::performer, "performer"},
       {attention::Kind::lfk, "lfk"},
       {attention::Kind::darkformer, "darkformer"}}};
};
template <>
struct EnumNames<attention::Mode> {
  static constexpr std::array<std::pair<attention::Mode, std::string_view>, 2> table{
      {{attention::Mode::linear, "linear"}, {attention::Mode::exact, "exact"}}};
};
template <>
struct EnumNames<attention::Proposal> {
  static constexpr std::array<std::pair<attention::Proposal, std::string_view>, 2> table{
      {{attention::Proposal::isotropic, "isotropic"}, {attention::Proposal::variance_optimal, "variance_optimal"}}};
};
template <>
struct EnumNames<attention::MatrixScope> {
  static constexpr std::array<std::pair<attention::MatrixScope, std::string_view>, 2> table{
      {{attention::MatrixScope::head, "head"}, {attention::MatrixScope::layer, "layer"}}};
};
template <>
struct EnumNames<attention::MatrixInit> {
  static constexpr std::array<std::pair<attention::MatrixInit, std::string_view>, 2> table{
      {{attention::MatrixInit::identity, "identity"}, {attention::MatrixInit::whiten, "whiten"}}};
};
template <>
struct EnumNames<attention::WindowedLayers> {
  static constexpr std::array<std::pair<attention::WindowedLayers, std::string_view>, 2> table{
      {{attention::WindowedLayers::softmax, "softmax"}, {attention::WindowedLayers::same, "same"}}};
};
template <>
struct EnumNames<attention::FarField> {
  static constexpr std::array<std::pair<attention::FarField, std::string_view>, 2> table{
      {{attention::FarField::features, "features"}, {attention::FarField::none, "none"}}};
};
template <>
struct EnumNames<attention::FeatureDraw> {
  static constexpr std::array<std::pair<attention::FeatureDraw, std::string_view>, 2> table{
      {{attention::FeatureDraw::iid, "iid"}, {attention::FeatureDraw::orthogonal, "orthogonal"}}};
};
}  // namespace dark
