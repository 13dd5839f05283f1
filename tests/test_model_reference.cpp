// The whole model against an independent PyTorch implementation of the same architecture
// (tests/reference/gen_model.py): same weights, same batch; the loss and every parameter
// gradient must agree in float64, and the loss in float32. The gemma3 case covers the Gemma 3
// family: sliding-window layers, QK-norm, sandwich norms, scaled embedding, tanh GeGLU.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "attention/factory.h"
#include "autograd/tape.h"
#include "nn/model.h"
#include "train/formats/safetensors.h"

namespace dark {
namespace {

const char* kRegenerate = "regenerate with: /usr/bin/python3 tests/reference/gen_model.py";

struct Reference {
  formats::SafetensorsContents file;
  nn::ModelConfig config;
};

Reference load(const std::string& name, DType dtype) {
  Reference r{formats::load_safetensors(std::string(DARK_TEST_DATA_DIR) + "/model_" + name + "_v1.safetensors"), {}};
  const auto c = nlohmann::json::parse(r.file.metadata.at("config"));
  r.config.vocab_size = c.at("vocab_size");
  r.config.d_model = c.at("d_model");
  r.config.n_layers = c.at("n_layers");
  r.config.n_heads = c.at("n_heads");
  r.config.n_kv_heads = c.at("n_kv_heads");
  r.config.d_ff = c.at("d_ff");
  r.config.mlp = parse_enum<nn::MlpKind>(c.at("mlp").get<std::string>(), "mlp");
  r.config.rope_theta = c.at("rope_theta");
  r.config.norm_eps = c.at("norm_eps");
  r.config.tie_embeddings = c.at("tie_embeddings");
  if (c.contains("family")) {  // the gemma3 case
    r.config.family = parse_enum<nn::ModelFamily>(c.at("family").get<std::string>(), "family");
    r.config.head_dim = c.at("head_dim");
    r.config.sliding_window = c.at("sliding_window");
    r.config.sliding_window_pattern = c.at("sliding_window_pattern");
    r.config.rope_local_theta = c.at("rope_local_theta");
  }
  r.config.dtype = dtype;
  return r;
}

// Builds the model, loads the reference weights, runs loss + backward.
double run(const Reference& r, nn::CausalLM& model) {
  for (auto& [name, p] : model.named_parameters()) {
    const auto it = r.file.tensors.find(name);
    EXPECT_NE(it, r.file.tensors.end()) << "reference has no tensor " << name << "; " << kRegenerate;
    Tensor value = it->second.to(p->dtype()).detach();
    value.set_requires_grad(true);
    *p = value;
  }
  EXPECT_EQ(model.named_parameters().size() * 2 + 2, r.file.tensors.size()) << kRegenerate;
  Tensor loss = model.loss(r.file.tensors.at("tokens").to(DType::i32));
  backward(loss);
  return loss.item();
}

class ModelReference : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelReference, Float64LossAndEveryGradientMatchPyTorch) {
  const Reference r = load(GetParam(), DType::f64);
  nn::CausalLM model(r.config, attention::make_factory({}));
  const double loss = run(r, model);
  const double want = r.file.tensors.at("loss").item();
  EXPECT_NEAR(loss, want, 1e-12 * std::fabs(want)) << kRegenerate;
  for (auto& [name, p] : model.named_parameters()) {
    const auto g = p->grad().to_vector<double>();
    const auto ref = r.file.tensors.at("grad." + name).to_vector<double>();
    ASSERT_EQ(g.size(), ref.size()) << name;
    double max_abs = 0, scale = 0;
    std::size_t worst = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      scale = std::max(scale, std::fabs(ref[i]));
      if (std::fabs(g[i] - ref[i]) > max_abs) max_abs = std::fabs(g[i] - ref[i]), worst = i;
    }
    EXPECT_LE(max_abs, 1e-10 * std::max(scale, 1e-3)) << name << ": max abs error " << max_abs << " at element " << worst
                                                      << " (ours " << g[worst] << ", PyTorch " << ref[worst] << "); "
                                                      << kRegenerate;
  }
}

TEST_P(ModelReference, Float32LossMatchesPyTorch) {
  const Reference r = load(GetParam(), DType::f32);
  nn::CausalLM model(r.config, attention::make_factory({}));
  const double loss = run(r, model);
  EXPECT_NEAR(loss, r.file.tensors.at("loss").item(), 1e-5) << kRegenerate;
}

INSTANTIATE_TEST_SUITE_P(Models, ModelReference, ::testing::Values("gqa_untied_swiglu", "tied_geglu", "gemma3"));

}  // namespace
}  // namespace dark
