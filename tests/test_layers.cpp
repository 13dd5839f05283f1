// Every nn layer gradchecked in float64 (inputs and parameters), plus the properties the
// model relies on: Llama parameter names, initialisation scales, dropout determinism.
#include <gtest/gtest.h>

#include <cmath>

#include "attention/factory.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "nn/model.h"

namespace dark::nn {
namespace {

Init f64_init(const std::string& name) { return Init{0.3, 5, name, DType::f64}; }

// Runs gradcheck on fn(inputs) where inputs[0] is the layer input and the rest are the
// layer's parameters, rebound before every call.
void check_layer(Module& layer, const Tensor& x, const std::function<Tensor(const Tensor&)>& forward) {
  std::vector<Tensor*> params;
  std::vector<Tensor> inputs = {x};
  for (auto& [name, p] : layer.named_parameters()) params.push_back(p), inputs.push_back(p->detach().clone());
  for (Tensor& t : inputs) t.set_requires_grad(true);
  const auto r = gradcheck(
      [&](const std::vector<Tensor>& in) {
        for (std::size_t i = 0; i < params.size(); ++i) *params[i] = in[i + 1];
        return forward(in[0]);
      },
      inputs);
  EXPECT_TRUE(r.ok) << r.report;
}

ModelConfig tiny_config() {
  ModelConfig c;
  c.vocab_size = 11;
  c.d_model = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.d_ff = 12;
  c.dtype = DType::f64;
  c.init_std = 0.3;
  return c;
}

TEST(Layers, LinearGradcheck) {
  Linear layer(5, 3, f64_init("lin"), /*bias=*/true);
  check_layer(layer, Tensor::randn({2, 4, 5}, 1, 0, DType::f64), [&](const Tensor& x) { return layer.forward(x); });
}

TEST(Layers, RMSNormGradcheck) {
  RMSNorm layer(6, 1e-5, DType::f64);
  *layer.weight = Tensor::randn({6}, 2, 0, DType::f64);
  check_layer(layer, Tensor::randn({3, 6}, 3, 0, DType::f64), [&](const Tensor& x) { return layer.forward(x); });
}

TEST(Layers, GatedMlpGradcheckSwiGluAndGeGlu) {
  for (auto act : {MlpKind::swiglu, MlpKind::geglu}) {
    GatedMlp layer(4, 7, act, f64_init("mlp"), f64_init("mlp"));
    check_layer(layer, Tensor::randn({2, 3, 4}, 4, 0, DType::f64), [&](const Tensor& x) { return layer.forward(x); });
  }
}

TEST(Layers, SelfAttentionAndDecoderBlockGradcheck) {
  const ModelConfig c = tiny_config();
  const auto factory = attention::make_factory({});
  SelfAttention attn(c, 0, f64_init("attn"), f64_init("attn"), factory);
  check_layer(attn, Tensor::randn({2, 5, 8}, 5, 0, DType::f64), [&](const Tensor& x) { return attn.forward(x); });
  DecoderBlock block(c, 1, factory);
  check_layer(block, Tensor::randn({1, 6, 8}, 6, 0, DType::f64), [&](const Tensor& x) {
    return block.forward(x, {0, Tensor()});
  });
}

// A block hands its last residual add on to the next block's input norm (or the final norm),
// which does it in its own pass (nn::Residual, add_rms_norm): the loss and every parameter's
// gradient are the bits of blocks that add first (DecoderBlock::forward on a tensor).
TEST(Layers, BlocksHandingOnTheirResidualAddHaveTheBitsOfAddingFirst) {
  for (const ModelFamily family : {ModelFamily::llama, ModelFamily::gemma3}) {
    ModelConfig c = tiny_config();
    c.n_layers = 3;
    c.dtype = DType::f32;
    c.family = family;
    CausalLM model(c, attention::make_factory({}));
    const Tensor tokens = Tensor::from_vector<std::int64_t>({1, 4, 9, 2, 2, 7, 0, 3, 10, 5, 6, 1}, {2, 6});
    const auto named = model.named_parameters();
    const auto run = [&](bool handed_on) {
      for (const auto& [name, p] : named) p->zero_grad();
      Tensor loss;
      if (handed_on) {
        loss = model.loss(tokens);
      } else {
        const Tensor inputs = core::slice(tokens, 1, 0, 5).contiguous();
        const Tensor targets = core::reshape(core::slice(tokens, 1, 1, 6).contiguous(), {10});
        Tensor h = model.model.embed_tokens.forward(inputs);
        if (family == ModelFamily::gemma3) h = mul_scalar(h, std::sqrt(8.0));
        for (std::size_t i = 0; i < model.model.layers.size(); ++i)
          h = model.model.layers[i]->forward(h, {2 * i + 1, Tensor()});
        const Tensor normed = reshape(model.model.norm.forward(h), {10, 8});
        loss = linear_cross_entropy(normed, *model.model.embed_tokens.weight, targets);
      }
      backward(loss);
      std::vector<std::vector<double>> parts = {{loss.item()}};
      for (const auto& [name, p] : named) parts.push_back(p->grad().to(DType::f64).to_vector<double>());
      return parts;
    };
    const auto handed_on = run(true), added = run(false);
    ASSERT_EQ(handed_on.size(), added.size());
    EXPECT_EQ(handed_on[0], added[0]) << "loss, " << enum_name(family);
    for (std::size_t i = 1; i < handed_on.size(); ++i)
      EXPECT_EQ(handed_on[i], added[i]) << named[i - 1].first << ", " << enum_name(family);
  }
}

TEST(Layers, EmbeddingGradcheck) {
  Embedding layer(7, 3, f64_init("emb"));
  const Tensor ids = Tensor::from_vector<std::int32_t>({1, 6, 1, 0}, {2, 2});
  std::vector<Tensor> inputs = {layer.weight->detach().clone()};
  inputs[0].set_requires_grad(true);
  const auto r = gradcheck([&](const std::vector<Tensor>& in) { *layer.weight = in[0]; return layer.forward(ids); }, inputs);
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(Layers, LlamaParameterNamesAndInitialisation) {
  ModelConfig c = tiny_config();
  c.dtype = DType::f32;
  c.init_std = 0.02;
  c.d_model = 64, c.n_heads = 4, c.n_kv_heads = 2, c.d_ff = 128, c.vocab_size = 300, c.n_layers = 3;
  c.tie_embeddings = false;
  CausalLM model(c, attention::make_factory({}));
  std::map<std::string, Tensor*> params;
  for (auto& [name, p] : model.named_parameters()) params[name] = p;
  EXPECT_EQ(params.size(), 1u + 3u * 9u + 1u + 1u);
  EXPECT_EQ(params.at("model.embed_tokens.weight")->shape(), (Shape{300, 64}));
  EXPECT_EQ(params.at("model.layers.2.self_attn.k_proj.weight")->shape(), (Shape{32, 64}));  // 2 kv heads x 16
  EXPECT_EQ(params.at("model.layers.0.mlp.down_proj.weight")->shape(), (Shape{64, 128}));
  EXPECT_EQ(params.at("lm_head.weight")->shape(), (Shape{300, 64}));
  auto std_of = [](const Tensor& t) {
    const auto v = t.to_vector<float>();
    double s = 0;
    for (float x : v) s += static_cast<double>(x) * x;
    return std::sqrt(s / static_cast<double>(v.size()));
  };
  EXPECT_NEAR(std_of(*params.at("model.layers.1.self_attn.q_proj.weight")), 0.02, 0.002);
  EXPECT_NEAR(std_of(*params.at("model.layers.1.self_attn.o_proj.weight")), 0.02 / std::sqrt(6.0), 0.0008);
  EXPECT_NEAR(std_of(*params.at("model.layers.1.mlp.down_proj.weight")), 0.02 / std::sqrt(6.0), 0.0008);
  EXPECT_EQ(params.at("model.norm.weight")->to_vector<float>(), std::vector<float>(64, 1.0f));
  // Initial weights depend on the name, not on construction order or model size (the
  // residual projections only by their 1/sqrt(2 n_layers) scale: 3 layers vs 2 here).
  c.n_layers = 2;
  CausalLM smaller(c, attention::make_factory({}));
  for (auto& [name, p] : smaller.named_parameters()) {
    const auto small = p->to_vector<float>(), big = params.at(name)->to_vector<float>();
    if (name.find("o_proj") == std::string::npos && name.find("down_proj") == std::string::npos) {
      EXPECT_EQ(small, big) << name;
      continue;
    }
    for (std::size_t i = 0; i < small.size(); ++i) ASSERT_NEAR(small[i], big[i] * std::sqrt(6.0 / 4.0), 1e-6) << name;
  }
}

TEST(Layers, DropoutIsInvertedAndKeyedByStream) {
  const Tensor x = Tensor::ones({1000});
  const auto a = dropout(x, 0.25, 7, {1, Tensor()}).to_vector<float>();
  EXPECT_EQ(a, dropout(x, 0.25, 7, {1, Tensor()}).to_vector<float>());
  EXPECT_NE(a, dropout(x, 0.25, 7, {2, Tensor()}).to_vector<float>());
  int kept = 0;
  for (float v : a) {
    EXPECT_TRUE(v == 0.0f || std::fabs(v - 1.0f / 0.75f) < 1e-6f);
    kept += v != 0.0f;
  }
  EXPECT_NEAR(kept / 1000.0, 0.75, 0.05);
  EXPECT_THROW(dropout(x, 1.0, 0, {0, Tensor()}), Error);
  EXPECT_THROW(dropout(x, -0.1, 0, {0, Tensor()}), Error);
  // A stream offset in a tensor (what a CUDA graph's launch writes) adds to the base.
  const Tensor offset = Tensor::from_vector<std::int64_t>({65536}, {1});
  EXPECT_EQ(dropout(x, 0.25, 7, {3, offset}).to_vector<float>(),
            dropout(x, 0.25, 7, {65539, Tensor()}).to_vector<float>());
}

// The fused dropout has the bits of the ops it replaces, x * (rand >= p) / (1 - p) written
// out, forward and backward (from its 1-bit mask), at a size that ends inside a Philox block
// and a mask word, with NaN, infinity and -0 passing through dropped and kept units alike.
TEST(Layers, DropoutHasTheBitsOfItsOpsWrittenOutBothWays) {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = Tensor::randn({3, 337}, 11, 0, dt);
    x = where(lt(Tensor::rand(x.shape(), 12, 0, dt), Tensor::scalar(0.02, dt)),
              Tensor::from_vector<double>({NAN, INFINITY, -0.0}, {3, 1}).to(dt), x);
    const Tensor dy = Tensor::randn(x.shape(), 13, 0, dt);
    const double p = 0.3;
    const std::uint64_t seed = 5, stream = 9;
    const Tensor keep =
        mul_scalar(ge(Tensor::rand(x.shape(), seed, stream, dt), Tensor::scalar(p, dt)), 1.0 / (1.0 - p));
    Tensor leaf = x.clone();
    leaf.set_requires_grad(true);
    backward(sum(mul(dropout(leaf, p, seed, {stream, Tensor()}), dy)));
    const auto bits = [](const Tensor& t) { return t.to(DType::f64).to_vector<double>(); };
    const std::vector<double> got = bits(dropout(x, p, seed, {stream, Tensor()})), want = bits(mul(x, keep));
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(std::isnan(want[i]) ? std::isnan(got[i])
                                      : got[i] == want[i] && std::signbit(got[i]) == std::signbit(want[i]))
          << dtype_name(dt) << " element " << i << ": " << got[i] << " vs " << want[i];
    }
    EXPECT_EQ(bits(leaf.grad()), bits(mul(dy, keep))) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace dark::nn
