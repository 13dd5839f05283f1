// Flat parameter buffers, AdamW / SGD against naive double-precision references of the
// PyTorch update rules, the learning-rate schedules, and ZeRO stage 1 (sharded buffers, norms
// and optimizers, several ranks simulated in one process) against the unsharded optimizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/kernels.h"
#include "nn/optim.h"
#include "nn/schedule.h"
#include "tests/test_util.h"

namespace dark::nn {
namespace {

std::vector<double> values(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }

struct TwoParams {
  Tensor w = Tensor::from_vector<float>({0.5f, -1.0f, 2.0f, 0.25f, 1.5f, -0.75f}, {2, 3});
  Tensor norm = Tensor::from_vector<float>({1.0f, 2.0f, 3.0f}, {3});
  std::vector<std::pair<std::string, Tensor*>> named() { return {{"layer.weight", &w}, {"layer.norm.weight", &norm}}; }
};

// loss = sum(w * c) + sum(norm^2): gradients c and 2 norm.
Tensor loss_of(TwoParams& p, const Tensor& c) { return add(sum(mul(p.w, c)), sum(square(p.norm))); }

TEST(ParameterBuffer, ParametersBecomeViewsAndGradientsAccumulateInPlace) {
  TwoParams p;
  ParameterBuffer buffer(p.named());
  EXPECT_TRUE(p.w.shares_storage(buffer.values()));
  EXPECT_EQ(values(p.w), (std::vector<double>{0.5, -1.0, 2.0, 0.25, 1.5, -0.75}));
  const Tensor c = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  backward(loss_of(p, c));
  backward(loss_of(p, c));  // accumulates
  EXPECT_TRUE(p.w.grad().shares_storage(buffer.grads()));
  EXPECT_EQ(values(p.w.grad()), (std::vector<double>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(values(p.norm.grad()), (std::vector<double>{4, 8, 12}));
  double sq = 0;
  for (double g : {2, 4, 6, 8, 10, 12, 4, 8, 12}) sq += g * g;
  EXPECT_NEAR(buffer.grad_norm(), std::sqrt(sq), 1e-9);
  buffer.zero_grad();
  EXPECT_EQ(values(p.norm.grad()), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(buffer.grad_norm(), 0.0);
}

TEST(Optimizer, AdamWMatchesTheReferenceUpdateAndSkipsDecayForNorms) {
  TwoParams p;
  ParameterBuffer buffer(p.named());
  OptimizerConfig config;  // adamw, betas (0.9, 0.95), eps 1e-8, wd 0.1, norms excluded
  Optimizer opt(buffer, config);
  EXPECT_TRUE(opt.decays("layer.weight"));
  EXPECT_FALSE(opt.decays("layer.norm.weight"));

  // Reference in double: torch.optim.AdamW's rule.
  std::vector<double> w = {0.5, -1.0, 2.0, 0.25, 1.5, -0.75}, n = {1, 2, 3};
  std::vector<double> mw(6, 0), vw(6, 0), mn(3, 0), vn(3, 0);
  const std::vector<double> c = {1, -2, 3, -4, 5, -6};
  const double lrs[] = {1e-2, 5e-3, 2e-2};
  for (int t = 1; t <= 3; ++t) {
    buffer.zero_grad();
    backward(loss_of(p, Tensor::from_vector<double>(c, {2, 3}).to(DType::f32)));
    opt.step(lrs[t - 1]);
    auto update = [&](std::vector<double>& x, std::vector<double>& m, std::vector<double>& v, std::vector<double> g, double wd) {
      const double lr = lrs[t - 1];
      for (std::size_t i = 0; i < x.size(); ++i) {
        x[i] -= lr * wd * x[i];
        m[i] = 0.9 * m[i] + 0.1 * g[i];
        v[i] = 0.95 * v[i] + 0.05 * g[i] * g[i];
        const double mhat = m[i] / (1 - std::pow(0.9, t)), vhat = v[i] / (1 - std::pow(0.95, t));
        x[i] -= lr * mhat / (std::sqrt(vhat) + 1e-8);
      }
    };
    std::vector<double> gn = {2 * n[0], 2 * n[1], 2 * n[2]};
    update(w, mw, vw, c, 0.1);
    update(n, mn, vn, gn, 0.0);
  }
  const auto got_w = values(p.w), got_n = values(p.norm);
  // PyTorch decays first (p *= 1 - lr wd) and then subtracts the Adam step, which does not
  // read p: the same as our single update p -= lr (adam + wd p). Tolerance: float32.
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(got_w[i], w[i], 2e-6) << i;
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(got_n[i], n[i], 2e-6) << i;
  EXPECT_EQ(opt.steps_taken(), 3);

  // State round trip: a fresh optimizer loaded with the state continues identically.
  TwoParams q;
  ParameterBuffer qbuffer(q.named());
  Tensor(qbuffer.values()).copy_(buffer.values());
  Optimizer restored(qbuffer, config);
  restored.load_state(opt.state());
  EXPECT_EQ(restored.steps_taken(), 3);
  buffer.zero_grad();
  qbuffer.zero_grad();
  backward(loss_of(p, Tensor::from_vector<double>(c, {2, 3}).to(DType::f32)));
  backward(loss_of(q, Tensor::from_vector<double>(c, {2, 3}).to(DType::f32)));
  opt.step(1e-2);
  restored.step(1e-2);
  EXPECT_EQ(values(buffer.values()), values(qbuffer.values()));
}

TEST(Optimizer, SgdWithMomentumMatchesReference) {
  TwoParams p;
  ParameterBuffer buffer(p.named());
  OptimizerConfig config;
  config.name = OptimizerKind::sgd;
  config.momentum = 0.9;
  config.weight_decay = 0.0;
  Optimizer opt(buffer, config);
  std::vector<double> n = {1, 2, 3}, buf(3, 0);
  for (int t = 0; t < 3; ++t) {
    buffer.zero_grad();
    backward(sum(square(p.norm)));
    opt.step(0.1);
    for (int i = 0; i < 3; ++i) buf[i] = 0.9 * buf[i] + 2 * n[i], n[i] -= 0.1 * buf[i];
  }
  const auto got = values(p.norm);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], n[i], 1e-5);
}

TEST(Optimizer, StateOfAnotherDtypeIsAnErrorNamingTheTensor) {
  TwoParams p;
  ParameterBuffer buffer(p.named());
  Optimizer opt(buffer, OptimizerConfig{});
  std::map<std::string, Tensor> state = opt.state();
  state["exp_avg.layer.weight"] = state["exp_avg.layer.weight"].to(DType::f64);
  try {
    opt.load_state(state);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "optimizer state: 'exp_avg.layer.weight' is f64, the optimizer keeps f32");
  }
}

TEST(Schedule, WarmupThenCosineOrLinearDecay) {
  ScheduleConfig s{ScheduleKind::cosine, 10, 0.1};
  const std::int64_t total = 110;
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 0, total), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 9, total), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 10, total), 1.0);
  EXPECT_NEAR(learning_rate_at(s, 1.0, 109, total), 0.1, 1e-12);
  EXPECT_NEAR(learning_rate_at(s, 1.0, 10 + 99 / 2.0, total), 0.55, 1e-2);
  s.kind = ScheduleKind::linear;
  EXPECT_NEAR(learning_rate_at(s, 2.0, 109, total), 0.2, 1e-12);
  EXPECT_NEAR(learning_rate_at(s, 2.0, 59, total), 2.0 - 1.8 * 49.0 / 99.0, 1e-12);
  s.kind = ScheduleKind::constant;
  EXPECT_EQ(learning_rate_at(s, 3.0, 50, total), 3.0);
}

TEST(Optimizer, MatchesGlobPatterns) {
  EXPECT_TRUE(matches_any("model.layers.0.input_layernorm.weight", {"*norm*"}));
  EXPECT_TRUE(matches_any("model.embed_tokens.weight", {"*embed_tokens*"}));
  EXPECT_FALSE(matches_any("model.layers.0.mlp.up_proj.weight", {"*norm*", "*embed_tokens*"}));
}

// ---- ZeRO stage 1: sharded buffers, norms and optimizers, simulated in one process ----

// Five parameters, 20401 elements: with 2 shards a boundary cuts b.weight, with 3 shards
// the boundaries cut b.weight and c.weight. Two are excluded from weight decay.
struct FiveParams {
  Tensor a = Tensor::randn({37, 150}, 1), norm = Tensor::randn({1000}, 2), b = Tensor::randn({64, 97}, 3),
         c = Tensor::randn({50, 150}, 4), embed = Tensor::randn({13, 11}, 5);
  std::vector<std::pair<std::string, Tensor*>> named() {
    return {{"a.weight", &a}, {"a.norm.weight", &norm}, {"b.weight", &b}, {"c.weight", &c},
            {"model.embed_tokens.weight", &embed}};
  }
};

// The raw bits of a float32 tensor's elements.
std::vector<std::uint32_t> bits(const Tensor& t) {
  std::vector<std::uint32_t> out;
  for (float f : t.to_vector<float>()) out.push_back(std::bit_cast<std::uint32_t>(f));
  return out;
}

// Gradients for step `step`, written over every parameter segment of buffer.
void set_grads(const ParameterBuffer& buffer, std::uint64_t step) {
  for (const auto& e : buffer.entries())
    ParameterBuffer::segment(buffer.grads(), e).copy_(Tensor::randn({e.numel}, 100 + step, e.offset));
}

TEST(ParameterBuffer, PadsWithZerosToShardsOfWholeNormChunks) {
  for (int shards : {1, 2, 3}) {
    FiveParams p;
    ParameterBuffer buffer(p.named(), shards);
    constexpr std::int64_t chunk = ParameterBuffer::kNormChunk;
    EXPECT_EQ(buffer.used(), 12768 + 7504 + 143) << shards;  // the last segment's end
    EXPECT_EQ(buffer.numel() % (shards * chunk), 0) << shards;
    EXPECT_LT(buffer.numel() - buffer.used(), shards * chunk) << shards;
    EXPECT_EQ(buffer.shard_size() * shards, buffer.numel()) << shards;
    EXPECT_EQ(buffer.shard_size() % chunk, 0) << shards;
    for (int i = 0; i < shards; ++i) {
      EXPECT_EQ(buffer.shard(i).begin, i * buffer.shard_size()) << shards;
      EXPECT_EQ(buffer.shard(i).size(), buffer.shard_size()) << shards;
    }
    set_grads(buffer, 0);
    // Everything outside the segments (alignment gaps and the tail) is zero, in both buffers.
    std::vector<bool> in_segment(buffer.numel(), false);
    for (const auto& e : buffer.entries()) std::fill_n(in_segment.begin() + e.offset, e.numel, true);
    const auto v = buffer.values().to_vector<float>(), g = buffer.grads().to_vector<float>();
    for (std::int64_t i = 0; i < buffer.numel(); ++i)
      if (!in_segment[i]) ASSERT_TRUE(v[i] == 0.0f && g[i] == 0.0f) << shards << " shards, element " << i;
    EXPECT_EQ(dark::testing::error_of([&] { buffer.shard(shards); }),
              str("ParameterBuffer: shard ", shards, " of ", shards));
  }
}

TEST(ParameterBuffer, ShardedChunkSumsGiveTheUnshardedNormExactly) {
  for (int shards : {1, 2, 3}) {
    FiveParams p;
    ParameterBuffer buffer(p.named(), shards);
    set_grads(buffer, 7);
    // What the trainer does: each rank its shard's chunks, all-gathered, summed in order.
    std::vector<Tensor> gathered;
    for (int r = 0; r < shards; ++r) {
      const Tensor chunks = buffer.grad_sq_chunks(buffer.shard(r));
      EXPECT_EQ(chunks.dtype(), DType::f64);
      EXPECT_EQ(chunks.shape(), (Shape{buffer.shard_size() / ParameterBuffer::kNormChunk}));
      gathered.push_back(chunks);
    }
    const Tensor sharded = ParameterBuffer::sum_chunks(concat(gathered, 0));
    const Tensor whole = buffer.grad_sq_norm();
    EXPECT_EQ(whole.dtype(), DType::f64);
    EXPECT_EQ(whole.numel(), 1);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(sharded.item()), std::bit_cast<std::uint64_t>(whole.item())) << shards;

    // Independent reference: every gradient squared and summed in float64.
    double sq = 0;
    for (const auto& e : buffer.entries())
      for (float g : ParameterBuffer::segment(buffer.grads(), e).to_vector<float>()) sq += double(g) * double(g);
    EXPECT_NEAR(buffer.grad_norm(), std::sqrt(sq), 1e-12 * std::sqrt(sq)) << shards;

    // Padding for more shards adds zero chunks, which change nothing.
    FiveParams q;
    ParameterBuffer unpadded(q.named(), 1);
    set_grads(unpadded, 7);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(unpadded.grad_sq_norm().item()), std::bit_cast<std::uint64_t>(whole.item()));
  }
}

// The one-launch kernels behind the gradient norm and the clip: each chunk's float64 sum of
// squares in sequence (the order the CPU's reduce sums a line in, so the norm kept its bits
// when the composed cast, square and sum were replaced), a NaN reaching the norm (the
// trainer's finiteness check reads it), and the clip's in-place scale rounding each product
// to float32 as a separate multiply does.
TEST(ParameterBuffer, ChunkNormsAreOrderedFloat64SumsAndTheClipScalesInPlace) {
  const std::int64_t chunk = 4096, chunks = 5;
  const Tensor x = mul_scalar(Tensor::randn({chunks * chunk}, 3, 0), 1e3);
  Tensor out = Tensor::empty({chunks}, DType::f64);
  kernels::chunk_sq_norms().get(DeviceType::cpu, DType::f32)(x, out, chunk);
  const std::vector<float> xs = x.to_vector<float>();
  const std::vector<double> got = out.to_vector<double>();
  for (std::int64_t c = 0; c < chunks; ++c) {
    double acc = 0;
    for (std::int64_t i = c * chunk; i < (c + 1) * chunk; ++i) acc += double(xs[i]) * double(xs[i]);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(got[c]), std::bit_cast<std::uint64_t>(acc)) << "chunk " << c;
  }
  const Tensor composed = sum(reshape(square(x.to(DType::f64)), {chunks, chunk}), {1});
  EXPECT_EQ(composed.to_vector<double>(), got);
  dark::testing::expect_error([&] { kernels::chunk_sq_norms().get(DeviceType::cpu, DType::f32)(x, out, 1000); },
                              {"chunk_sq_norms", "5 chunks of 1000"});

  FiveParams p;
  ParameterBuffer buffer(p.named(), 1);
  set_grads(buffer, 7);
  const std::vector<float> before = buffer.grads().to_vector<float>();
  buffer.scale_grads(0.3);
  const std::vector<float> after = buffer.grads().to_vector<float>();
  for (std::size_t i = 0; i < before.size(); ++i) ASSERT_EQ(after[i], before[i] * 0.3f) << "element " << i;

  ParameterBuffer::segment(buffer.grads(), buffer.entries()[1]).fill_(std::nan(""));
  EXPECT_TRUE(std::isnan(buffer.grad_norm()));
}

TEST(ParameterBuffer, NormChunkRangesMustBeWholeChunksInsideTheBuffer) {
  FiveParams p;
  ParameterBuffer buffer(p.named(), 2);
  EXPECT_EQ(buffer.grad_sq_chunks({4096, 4096}).numel(), 0);
  dark::testing::expect_error([&] { buffer.grad_sq_chunks({0, 100}); }, {"grad_sq_chunks: range [0, 100)", "4096"});
  dark::testing::expect_error([&] { buffer.grad_sq_chunks({0, buffer.numel() + 4096}); }, {"is not within [0, 24576)"});
  dark::testing::expect_error([&] { ParameterBuffer::sum_chunks(Tensor::zeros({3})); }, {"sum_chunks", "f32[3]"});
}

// Every parameter of `got` holds the same bits as in `want`.
void expect_same_params(const ParameterBuffer& got, const ParameterBuffer& want, const std::string& what) {
  ASSERT_EQ(got.entries().size(), want.entries().size());
  for (std::size_t i = 0; i < got.entries().size(); ++i)
    EXPECT_EQ(bits(ParameterBuffer::segment(got.values(), got.entries()[i])),
              bits(ParameterBuffer::segment(want.values(), want.entries()[i])))
        << what << ": " << got.entries()[i].name;
}

// Equal keys, shapes and bits.
void expect_same_state(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [key, t] : want) {
    ASSERT_TRUE(got.count(key)) << what << ": no " << key;
    const Tensor& g = got.at(key);
    EXPECT_EQ(g.shape(), t.shape()) << what << ": " << key;
    ASSERT_EQ(g.dtype(), t.dtype()) << what << ": " << key;
    if (t.dtype() == DType::f32) EXPECT_EQ(bits(g), bits(t)) << what << ": " << key;
    else EXPECT_EQ(g.to_vector<std::int64_t>(), t.to_vector<std::int64_t>()) << what << ": " << key;
  }
}

// W data-parallel ranks in one process, each with its own copy of the model, a buffer padded
// for W shards and an optimizer over its own shard, as ZeRO-1 runs them.
struct ZeroRanks {
  std::vector<std::unique_ptr<FiveParams>> models;
  std::vector<std::unique_ptr<ParameterBuffer>> buffers;
  std::vector<std::unique_ptr<Optimizer>> optimizers;

  ZeroRanks(int world, const OptimizerConfig& config, const ParameterBuffer& like) {
    for (int r = 0; r < world; ++r) {
      models.push_back(std::make_unique<FiveParams>());
      buffers.push_back(std::make_unique<ParameterBuffer>(models.back()->named(), world));
      for (std::size_t i = 0; i < like.entries().size(); ++i)
        ParameterBuffer::segment(buffers.back()->values(), buffers.back()->entries()[i])
            .copy_(ParameterBuffer::segment(like.values(), like.entries()[i]));
      optimizers.push_back(std::make_unique<Optimizer>(*buffers.back(), config, buffers.back()->shard(r)));
    }
  }
  int world() const { return static_cast<int>(buffers.size()); }

  // One step: each rank has the reduced gradients of its own shard only (NaN elsewhere, to
  // show that nothing else is read), updates its shard, and the parameters are all-gathered.
  void step(std::uint64_t step, double lr) {
    for (int r = 0; r < world(); ++r) {
      ParameterBuffer& buffer = *buffers[r];
      set_grads(buffer, step);
      const FlatRange mine = buffer.shard(r);
      const Tensor grads = buffer.grads();
      if (mine.begin > 0) core::slice(grads, 0, 0, mine.begin).fill_(std::nan(""));
      if (mine.end < buffer.numel()) core::slice(grads, 0, mine.end, buffer.numel()).fill_(std::nan(""));
      optimizers[r]->step(lr);
    }
    for (int r = 0; r < world(); ++r) {
      const FlatRange s = buffers[r]->shard(r);
      const Tensor updated = core::slice(buffers[r]->values(), 0, s.begin, s.end);
      for (int q = 0; q < world(); ++q)
        if (q != r) core::slice(buffers[q]->values(), 0, s.begin, s.end).copy_(updated);
    }
  }

  // Rank r's state(), its gather standing in for an all-gather of every rank's buffer.
  std::map<std::string, Tensor> state(int r) const {
    std::vector<std::vector<Tensor>> flats(world());  // per rank: its flat state buffers, in call order
    for (int q = 0; q < world(); ++q)
      optimizers[q]->state([&](const Tensor& mine) {
        flats[q].push_back(mine.clone());
        return Tensor::zeros({buffers[q]->numel()});
      });
    std::size_t call = 0;
    return optimizers[r]->state([&](const Tensor& mine) {
      std::vector<Tensor> parts;
      for (int q = 0; q < world(); ++q) parts.push_back(q == r ? mine : flats[q].at(call));
      ++call;
      return concat(parts, 0);
    });
  }
};

OptimizerConfig sgd_config() {
  OptimizerConfig config;
  config.name = OptimizerKind::sgd;
  config.momentum = 0.9;
  config.weight_decay = 0.01;
  return config;
}

// Several steps of W sharded optimizers against one unsharded optimizer: parameters after
// every step and the gathered state are the same bits.
void expect_sharded_optimizer_matches_unsharded(const OptimizerConfig& config, int world) {
  const std::string what = str(enum_name(config.name), ", ", world, " shards");
  FiveParams p;
  ParameterBuffer buffer(p.named());
  Optimizer reference(buffer, config);
  ZeroRanks ranks(world, config, buffer);
  EXPECT_EQ(ranks.optimizers[0]->state_bytes(), reference.state_bytes() / buffer.numel() * ranks.buffers[0]->shard_size());
  const double lrs[] = {1e-2, 3e-2, 5e-3, 2e-2};
  for (std::uint64_t step = 0; step < 4; ++step) {
    set_grads(buffer, step);
    reference.step(lrs[step]);
    ranks.step(step, lrs[step]);
    for (int r = 0; r < world; ++r) expect_same_params(*ranks.buffers[r], buffer, str(what, ", step ", step, ", rank ", r));
  }
  for (int r = 0; r < world; ++r) expect_same_state(ranks.state(r), reference.state(), str(what, ", state of rank ", r));

  // Resume: sharded optimizers loaded from the unsharded state continue exactly as it does.
  ZeroRanks resumed(world, config, buffer);
  for (const auto& opt : resumed.optimizers) opt->load_state(reference.state());
  EXPECT_EQ(resumed.optimizers[0]->steps_taken(), 4);
  for (std::uint64_t step = 4; step < 7; ++step) {
    set_grads(buffer, step);
    reference.step(1e-2);
    resumed.step(step, 1e-2);
    for (int r = 0; r < world; ++r) expect_same_params(*resumed.buffers[r], buffer, str(what, ", resumed step ", step, ", rank ", r));
  }
  for (int r = 0; r < world; ++r) expect_same_state(resumed.state(r), reference.state(), str(what, ", resumed state of rank ", r));
}

TEST(Optimizer, ShardedAdamWEqualsUnshardedBitForBit) {
  OptimizerConfig config;  // adamw, weight decay 0.1 except for the norm and the embedding
  for (int world : {2, 3}) expect_sharded_optimizer_matches_unsharded(config, world);
}

TEST(Optimizer, ShardedSgdWithMomentumEqualsUnshardedBitForBit) {
  for (int world : {2, 3}) expect_sharded_optimizer_matches_unsharded(sgd_config(), world);
}

TEST(Optimizer, ShardsCoverTheBufferAndKeepOnlyTheirState) {
  FiveParams p;
  ParameterBuffer buffer(p.named(), 3);
  const Optimizer whole(buffer, OptimizerConfig{});
  EXPECT_FALSE(whole.sharded());
  EXPECT_EQ(whole.shard().begin, 0);
  EXPECT_EQ(whole.shard().end, buffer.numel());
  EXPECT_EQ(whole.state_bytes(), 2 * 4 * buffer.numel());
  const Optimizer second(buffer, sgd_config(), buffer.shard(1));
  EXPECT_TRUE(second.sharded());
  EXPECT_EQ(second.shard().begin, buffer.shard_size());
  EXPECT_EQ(second.state_bytes(), 4 * buffer.shard_size());
}

TEST(Optimizer, ShardedStateWithoutGatherIsAnError) {
  FiveParams p;
  ParameterBuffer buffer(p.named(), 2);
  const Optimizer opt(buffer, OptimizerConfig{}, buffer.shard(1));
  EXPECT_EQ(dark::testing::error_of([&] { opt.state(); }),
            "optimizer state: this optimizer holds only the shard [12288, 24576) of the 24576 parameter elements; "
            "state() needs a gather function that returns the full flat state buffer");
  dark::testing::expect_error([&] { opt.state([](const Tensor& mine) { return mine; }); },
                              {"optimizer state: gather returned f32[12288]", "expected f32[24576]"});
  dark::testing::expect_error([&] { Optimizer(buffer, OptimizerConfig{}, {0, buffer.numel() + 1}); },
                              {"optimizer: shard [0, 24577) is not a range of the parameter buffer [0, 24576)"});
}

}  // namespace
}  // namespace dark::nn
