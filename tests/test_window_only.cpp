// What each part of an exact-window layer carries (attention.far_field, train/ablation.h):
// window only (far_field none) against a naive float64 softmax of the transformed scores over
// each query's W nearest keys (performer, lfk, darkformer with a random rank-r M; grouped-query
// heads, key padding, sliding-window layers shorter and longer than W), its decoding against
// its forward, its gradients reaching q_proj's inputs and M; features only against the kind
// built without a window; the evaluation ablations of a Gemma-3-shaped model (a local and a
// global layer, GQA) against models built with those settings, the model restored after; the
// final evaluation of a run with evaluation.ablation; the config rules, and the export's refusal.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "attention/config.h"
#include "attention/darkformer_attention.h"
#include "attention/factory.h"
#include "attention/random_feature_attention.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "data/loader.h"
#include "data/shard.h"
#include "nn/model.h"
#include "data/prepare.h"
#include "tests/test_util.h"
#include "tests/train_test_util.h"
#include "train/cli/loaded_run.h"
#include "train/metrics/run_metrics.h"
#include "train/trainer.h"
#include "train/ablation.h"
#include "train/config.h"
#include "train/evaluate.h"

namespace dark::window_only_test {
namespace {

using testing::expect_close;
using testing::TempDir;

struct Case {
  std::int64_t b, t, hq, hkv, d, window, layer_window;
  bool masked;
  std::string name() const {
    return str("B", b, " T", t, " H", hq, "/", hkv, " d", d, " W", window, " w", layer_window, masked ? " masked" : "");
  }
  std::int64_t near() const { return layer_window > 0 ? std::min(window, layer_window) : window; }
  std::vector<std::int32_t> real() const {
    return masked ? testing::padding_mask(testing::Padding::holes, b, t) : std::vector<std::int32_t>(b * t, 1);
  }
  Tensor mask() const { return masked ? testing::mask_tensor(real(), b) : Tensor(); }
};

attention::AttentionConfig window_config(attention::Kind kind, int window, attention::FarField far_field) {
  attention::AttentionConfig a;
  a.kind = kind;
  a.num_features = 8;
  a.seed = 5;
  a.chunk_size = 4;
  a.exact_window = window;
  a.far_field = far_field;
  a.darkformer.rank = kind == attention::Kind::darkformer ? 3 : 0;  // r < d: the padded flash op
  return a;
}

std::unique_ptr<nn::AttentionKernel> make_kernel(const Case& c, attention::Kind kind, attention::FarField far_field) {
  nn::AttentionShape s;
  s.n_heads = c.hq;
  s.n_kv_heads = c.hkv;
  s.head_dim = c.d;
  s.layer = 1;
  s.dtype = DType::f64;
  s.window = c.layer_window;
  auto kernel = attention::make_factory(window_config(kind, static_cast<int>(c.window), far_field))(s);
  if (auto* dark = dynamic_cast<attention::DarkformerAttention*>(kernel.get())) {
    NoGradGuard no_grad;  // a learned-looking M, not the initial one
    dark->matrix->copy_(Tensor::randn(dark->matrix->shape(), 21, 0, DType::f64));
  }
  return kernel;
}

// The transform of one row of q or k (d values) for kv head `kv`: d^(-1/4) M x (M = I but for
// darkformer), from M's values directly.
std::vector<double> transform(const nn::AttentionKernel& kernel, const double* x, std::int64_t d, std::int64_t kv) {
  const double scale = std::pow(static_cast<double>(d), -0.25);
  const auto* dark = dynamic_cast<const attention::DarkformerAttention*>(&kernel);
  if (!dark) {
    std::vector<double> out(x, x + d);
    for (double& v : out) v *= scale;
    return out;
  }
  const std::vector<double> m = testing::values(*dark->matrix);
  const std::int64_t r = dark->matrix->size(1), index = dark->matrix->size(0) == 1 ? 0 : kv;
  std::vector<double> out(r, 0.0);
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < d; ++j) out[i] += scale * m[(index * r + i) * d + j] * x[j];
  return out;
}

// Window only from its definition: query t's keys are the real j with t - near < j <= t,
// weighted by softmax of x~_q . x~_k; no key -> 0. float64.
Tensor naive_window_only(const nn::AttentionKernel& kernel, const Case& c, const std::vector<Tensor>& x) {
  const std::vector<double> q = testing::values(x[0]), k = testing::values(x[1]), v = testing::values(x[2]);
  const std::vector<std::int32_t> real = c.real();
  const std::int64_t group = c.hq / c.hkv;
  std::vector<double> out(c.b * c.t * c.hq * c.d, 0.0);
  for (std::int64_t b = 0; b < c.b; ++b)
    for (std::int64_t h = 0; h < c.hq; ++h) {
      const std::int64_t kv = h / group;
      for (std::int64_t t = 0; t < c.t; ++t) {
        const std::vector<double> xq = transform(kernel, &q[((b * c.t + t) * c.hq + h) * c.d], c.d, kv);
        std::vector<double> scores;
        std::vector<std::int64_t> keys;
        for (std::int64_t j = std::max<std::int64_t>(0, t - c.near() + 1); j <= t; ++j) {
          if (!real[b * c.t + j]) continue;
          const std::vector<double> xk = transform(kernel, &k[((b * c.t + j) * c.hkv + kv) * c.d], c.d, kv);
          double s = 0;
          for (std::size_t i = 0; i < xq.size(); ++i) s += xq[i] * xk[i];
          scores.push_back(s);
          keys.push_back(j);
        }
        if (keys.empty()) continue;
        const double top = *std::max_element(scores.begin(), scores.end());
        double z = 0;
        for (const double s : scores) z += std::exp(s - top);
        for (std::size_t n = 0; n < keys.size(); ++n)
          for (std::int64_t i = 0; i < c.d; ++i)
            out[((b * c.t + t) * c.hq + h) * c.d + i] +=
                std::exp(scores[n] - top) / z * v[((b * c.t + keys[n]) * c.hkv + kv) * c.d + i];
      }
    }
  return Tensor::from_vector(out, {c.b, c.t, c.hq, c.d});
}

std::vector<Tensor> inputs(const Case& c, std::uint64_t seed) {
  return {Tensor::randn({c.b, c.t, c.hq, c.d}, seed, 0, DType::f64), Tensor::randn({c.b, c.t, c.hkv, c.d}, seed, 1, DType::f64),
          Tensor::randn({c.b, c.t, c.hkv, c.d}, seed, 2, DType::f64)};
}

const Case kCases[] = {
    {2, 23, 4, 2, 4, 5, 0, true},   // grouped-query heads, global layer, padding holes
    {1, 19, 2, 2, 4, 4, 7, false},  // a sliding-window layer longer than the window: near W
    {2, 17, 2, 1, 4, 6, 3, true},   // a sliding-window layer shorter than W: near w
    {1, 6, 2, 1, 4, 9, 0, false},   // W beyond the sequence: every key
};

TEST(WindowOnly, ForwardIsSoftmaxOfTheTransformedScoresOverTheNearestKeys) {
  for (const Case& c : kCases)
    for (attention::Kind kind : {attention::Kind::performer, attention::Kind::lfk, attention::Kind::darkformer}) {
      auto kernel = make_kernel(c, kind, attention::FarField::none);
      const std::vector<Tensor> x = inputs(c, 3);
      expect_close(kernel->forward(x[0], x[1], x[2], c.mask()), naive_window_only(*kernel, c, x), 1e-12, 1e-12,
                   c.name() + " " + kernel->kind());
    }
}

TEST(WindowOnly, DecodingEqualsTheForward) {
  for (const Case& c : kCases) {
    if (c.masked) continue;  // decoding has no key padding
    for (attention::Kind kind : {attention::Kind::performer, attention::Kind::darkformer}) {
      auto kernel = make_kernel(c, kind, attention::FarField::none);
      const std::vector<Tensor> x = inputs(c, 4);
      const Tensor whole = kernel->forward(x[0], x[1], x[2]);
      std::unique_ptr<nn::DecodeState> state;
      std::vector<Tensor> parts;
      // A prefix of 3 positions, then one at a time.
      for (std::int64_t t0 = 0; t0 < c.t; t0 = t0 == 0 ? 3 : t0 + 1) {
        const std::int64_t t1 = t0 == 0 ? std::min<std::int64_t>(3, c.t) : t0 + 1;
        parts.push_back(kernel->decode(slice(x[0], 1, t0, t1), slice(x[1], 1, t0, t1), slice(x[2], 1, t0, t1), state));
      }
      expect_close(concat(parts, 1), whole, 1e-12, 1e-12, c.name() + " decode " + kernel->kind());
    }
  }
}

TEST(WindowOnly, GradientsReachTheInputsAndTheTransform) {
  // The window-only forward trains: against float64 finite differences of a random
  // projection of its output, for q, k, v and DARKFormer's M.
  const Case c{1, 9, 2, 1, 4, 3, 0, false};
  auto kernel = make_kernel(c, attention::Kind::darkformer, attention::FarField::none);
  auto* dark = dynamic_cast<attention::DarkformerAttention*>(kernel.get());
  std::vector<Tensor> x = inputs(c, 6);
  for (Tensor& t : x) t.set_requires_grad(true);
  dark->matrix->set_requires_grad(true);
  const Tensor probe = Tensor::randn({c.b, c.t, c.hq, c.d}, 7, 0, DType::f64);
  auto objective = [&] { return sum(mul(kernel->forward(x[0], x[1], x[2]), probe)); };
  backward(objective());
  NoGradGuard no_grad;
  const double h = 1e-6;
  std::vector<Tensor*> leaves = {&x[0], &x[1], &x[2], dark->matrix};
  for (std::size_t n = 0; n < leaves.size(); ++n) {
    Tensor& leaf = *leaves[n];
    const std::vector<double> grad = testing::values(leaf.grad());
    std::vector<double> values = testing::values(leaf);
    for (std::size_t i = 0; i < values.size(); i += 5) {  // every fifth entry
      const double keep = values[i];
      values[i] = keep + h;
      leaf.copy_(Tensor::from_vector(values, leaf.shape()));
      const double up = objective().item();
      values[i] = keep - h;
      leaf.copy_(Tensor::from_vector(values, leaf.shape()));
      const double down = objective().item();
      values[i] = keep;
      leaf.copy_(Tensor::from_vector(values, leaf.shape()));
      EXPECT_NEAR(grad[i], (up - down) / (2 * h), 1e-6 * (1 + std::fabs(grad[i]))) << "input " << n << " entry " << i;
    }
  }
}

TEST(WindowOnly, FeaturesOnlyIsTheKindWithoutAWindow) {
  // set_far_field and set_exact_window(0) on a window-only kernel: the kind as built without a window.
  for (const Case& c : {kCases[0], kCases[1]})
    for (attention::Kind kind : {attention::Kind::performer, attention::Kind::darkformer}) {
      auto windowed = make_kernel(c, kind, attention::FarField::none);
      auto plain = make_kernel({c.b, c.t, c.hq, c.hkv, c.d, 0, c.layer_window, c.masked}, kind, attention::FarField::features);
      auto& rf = dynamic_cast<attention::RandomFeatureAttention&>(*windowed);
      testing::expect_error([&] { rf.set_exact_window(0); }, {"far_field none", "set far_field features first"});
      rf.set_far_field(attention::FarField::features);
      rf.set_exact_window(0);
      const std::vector<Tensor> x = inputs(c, 8);
      expect_close(windowed->forward(x[0], x[1], x[2], c.mask()), plain->forward(x[0], x[1], x[2], c.mask()), 0, 0,
                   c.name() + " features only " + windowed->kind());
      testing::expect_error([&] { rf.set_far_field(attention::FarField::none); }, {"needs an exact window"});
    }
}

TEST(WindowOnly, DescribedAndRefusedByTheExport) {
  const Case c = kCases[0];
  auto kernel = make_kernel(c, attention::Kind::performer, attention::FarField::none);
  EXPECT_EQ(kernel->describe(),
            "performer with an exact window of 5 keys and no far field (window only: sliding-window attention with the "
            "kind's exact kernel)");
  EXPECT_FALSE(kernel->redraws_features());  // a redraw changes nothing it computes
  testing::expect_error([&] { kernel->export_form(); }, {"attention layer 1 runs performer", "far_field \"none\""});
}

// ---- the evaluation ablations on a model ----

constexpr int kVocab = 29;

// Gemma-3-shaped: layer 0 local (sliding window 10), layer 1 global; 4 query heads on 2 kv
// heads; every layer performer with an exact window of 6 (windowed_layers "same").
std::unique_ptr<nn::CausalLM> windowed_model(int window, attention::FarField far_field) {
  nn::ModelConfig c;
  c.family = nn::ModelFamily::gemma3;
  c.vocab_size = kVocab, c.d_model = 32, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.d_ff = 32;
  c.sliding_window = 10, c.sliding_window_pattern = 2;
  c.init_std = 0.4;
  c.max_seq_len = 64;
  attention::AttentionConfig a = window_config(attention::Kind::performer, window, far_field);
  return std::make_unique<nn::CausalLM>(c, attention::make_factory(a));
}

data::ValidationSet validation(const TempDir& tmp) {
  std::vector<std::int32_t> ids(4 * 40 + 1);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7 + i / 3) % kVocab);
  const std::string path = tmp / "val.bin";
  data::ShardWriter w(path, "test", kVocab);
  w.append_document(ids);
  w.finish();
  return data::ValidationSet(data::TokenShard::open(path, "test"), 2, 40);
}

void expect_same(const train::EvalMetrics& a, const train::EvalMetrics& b, const std::string& what) {
  EXPECT_EQ(a.loss, b.loss) << what;
  EXPECT_EQ(a.accuracy, b.accuracy) << what;
  ASSERT_EQ(a.by_position.size(), b.by_position.size()) << what;
  for (std::size_t i = 0; i < a.by_position.size(); ++i) EXPECT_EQ(a.by_position[i].loss, b.by_position[i].loss) << what;
}

TEST(Ablation, EachPartIsTheModelBuiltWithThatPartAlone) {
  TempDir tmp;
  const data::ValidationSet val = validation(tmp);
  auto model = windowed_model(6, attention::FarField::features);
  ASSERT_EQ(train::exact_window_layers(*model).size(), 2u);
  const train::EvalMetrics full = train::evaluate(*model, val, 0);
  const train::EvalMetrics window_only = train::evaluate_ablated(*model, val, 0, train::Ablation::window_only);
  const train::EvalMetrics features_only = train::evaluate_ablated(*model, val, 0, train::Ablation::features_only);
  // The same weights and features, built with the part alone (the initialisation and the
  // draws are keyed by seed and name only).
  expect_same(window_only, train::evaluate(*windowed_model(6, attention::FarField::none), val, 0), "window only");
  expect_same(features_only, train::evaluate(*windowed_model(0, attention::FarField::features), val, 0), "features only");
  EXPECT_NE(window_only.loss, full.loss);
  EXPECT_NE(features_only.loss, full.loss);
  // Restored: the model evaluates as before, and says so.
  expect_same(train::evaluate(*model, val, 0), full, "after the ablations");
  for (attention::RandomFeatureAttention* k : train::exact_window_layers(*model)) {
    EXPECT_EQ(k->config().exact_window, 6);
    EXPECT_EQ(k->config().far_field, attention::FarField::features);
  }
  // A window-only model's features-only ablation brings its features back.
  auto trained_window_only = windowed_model(6, attention::FarField::none);
  expect_same(train::evaluate_ablated(*trained_window_only, val, 0, train::Ablation::features_only), features_only,
              "features only of a window-only model");
  EXPECT_EQ(train::exact_window_layers(*trained_window_only)[0]->config().far_field, attention::FarField::none);
  // Without an exact window there is nothing to take apart.
  auto plain = windowed_model(0, attention::FarField::features);
  testing::expect_error([&] { train::AblationScope scope(*plain, train::Ablation::window_only); },
                        {"ablation window_only", "no layer with an exact window"});
  EXPECT_EQ(train::parse_ablation("window"), train::Ablation::window_only);
  EXPECT_EQ(train::parse_ablation("features_only"), train::Ablation::features_only);
  testing::expect_error([] { train::parse_ablation("far"); }, {"--ablate: \"far\" is not an ablation"});
}

TEST(Ablation, WindowOnlyDecodingEqualsTheForwardThroughTheModel) {
  auto model = windowed_model(6, attention::FarField::features);
  model->train(false);
  const train::AblationScope scope(*model, train::Ablation::window_only);
  std::vector<std::int32_t> ids(30);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 5 + 1) % kVocab);
  const Tensor tokens = Tensor::from_vector(ids, {1, 30});
  NoGradGuard no_grad;
  const Tensor whole = model->forward(tokens);
  nn::DecodeCache cache;
  std::vector<Tensor> parts{model->decode(slice(tokens, 1, 0, 12), cache)};
  for (std::int64_t t = 12; t < 30; ++t) parts.push_back(model->decode(slice(tokens, 1, t, t + 1), cache));
  expect_close(concat(parts, 1), whole, 1e-4, 1e-4, "window-only decoding");
}

TEST(Ablation, TheFinalEvaluationOfARunCarriesBoth) {
  TempDir tmp;
  nlohmann::json config = train::quiet(train::tiny_config(tmp, "run", 6));
  config["attention"] = {{"kind", "performer"}, {"num_features", 8}, {"exact_window", 8}};
  config["evaluation"] = {{"ablation", true}};
  config["training"]["eval_interval"] = 3;  // an evaluation at step 3 as well: without the ablations
  train::train(train::parse_config(config), {});
  const metrics::RunMetrics m = metrics::read_metrics(tmp.path() / "run/metrics.jsonl");
  ASSERT_EQ(m.evals.size(), 2u);
  EXPECT_TRUE(m.evals[0].ablations.empty());
  const metrics::EvalRecord& e = m.evals[1];
  ASSERT_EQ(e.ablations.size(), 2u);
  // The numbers are those of the ablations on the saved model and the run's validation batches.
  cli::LoadedRun run = cli::load_run((tmp.path() / "run").string());
  const data::PreparedData d = data::open_prepared(run.config.data.dir);
  const data::ValidationSet val(d.open_shard(data::Split::val), run.config.training.batch_size, run.config.data.seq_len,
                                run.config.data.val_windows, Device::cpu(), d.window_bos_id);
  for (const metrics::AblationRecord& a : e.ablations) {
    const train::EvalMetrics want =
        train::evaluate_ablated(*run.model, val, run.config.training.eval_batches, train::parse_ablation(a.name));
    EXPECT_DOUBLE_EQ(a.loss, want.loss) << a.name;
    EXPECT_DOUBLE_EQ(a.accuracy, want.accuracy) << a.name;
    ASSERT_EQ(a.by_position.size(), 1u) << a.name;  // seq_len 32: the first bucket only
    EXPECT_DOUBLE_EQ(a.by_position[0].loss, want.loss) << a.name;
    EXPECT_NE(a.loss, e.loss) << a.name;
  }
  EXPECT_DOUBLE_EQ(train::evaluate(*run.model, val, run.config.training.eval_batches).loss, e.loss);
}

TEST(Ablation, ConfigRules) {
  const auto parse = [](const char* text) { return train::parse_config(nlohmann::json::parse(text)); };
  EXPECT_EQ(testing::error_of([&] { parse(R"({"attention": {"kind": "performer", "far_field": "none"}})"); }),
            "config: attention.far_field: \"none\" needs an exact window (exact_window > 0): without one the layer "
            "would attend to no key");
  testing::expect_error([&] { parse(R"({"attention": {"kind": "performer", "far_field": "some"}})"); },
                        {"attention.far_field", "features, none"});
  const train::RunConfig ok =
      parse(R"({"attention": {"kind": "lfk", "exact_window": 8, "layers": {"1": {"far_field": "none"}}}})");
  EXPECT_EQ(train::attention_for_layer(ok, 0).far_field, attention::FarField::features);
  EXPECT_EQ(train::attention_for_layer(ok, 1).far_field, attention::FarField::none);
  EXPECT_EQ(testing::error_of([&] { parse(R"({"evaluation": {"ablation": true}})"); }),
            "config: evaluation.ablation: needs a layer with an exact window (attention.exact_window > 0 on a "
            "performer, lfk or darkformer layer in mode linear): there is no window and no far field to take apart");
  EXPECT_TRUE(parse(R"({"attention": {"kind": "darkformer", "exact_window": 4}, "evaluation": {"ablation": true}})")
                  .evaluation.ablation);
}

}  // namespace
}  // namespace dark::window_only_test
