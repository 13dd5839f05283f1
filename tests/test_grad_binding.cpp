// Gradient binding and gradient-ready hooks (autograd/grad_binding.h): bound gradients
// against an unbound twin's, the errors, when each hook fires and with what gradient, and
// ParameterBuffer's per-entry hooks on a real model.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "attention/factory.h"
#include "autograd/grad_binding.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "autograd/weights.h"
#include "core/kernel_profile.h"
#include "nn/model.h"
#include "nn/parameter_buffer.h"
#include "test_util.h"

namespace dark {
namespace {

using dark::testing::error_of;
using dark::testing::values;


Tensor param(const Shape& shape, std::uint64_t seed) { return Tensor::randn(shape, seed).set_requires_grad(); }

TEST(BindGrad, BackwardAccumulatesIntoTheBoundViewAndZeroGradKeepsIt) {
  const Tensor x = Tensor::randn({2, 3}, 1), dout = Tensor::randn({2, 4}, 2);
  Tensor w = param({3, 4}, 3);
  Tensor twin = w.detach().clone().set_requires_grad();  // unbound, computed independently
  Tensor flat = Tensor::full({32}, 7.0);
  Tensor view = core::reshape(core::slice(flat, 0, 4, 16), {3, 4});
  view.fill_(0.0);
  bind_grad(w, view);
  auto loss = [&](const Tensor& p) { return sum(mul(matmul(x, p), dout)); };
  for (int i = 0; i < 2; ++i) backward(loss(w)), backward(loss(twin));  // accumulates
  EXPECT_TRUE(w.grad().shares_storage(flat));
  EXPECT_EQ(values(w.grad()), values(twin.grad()));
  EXPECT_EQ(values(core::reshape(core::slice(flat, 0, 4, 16), {3, 4})), values(twin.grad()));
  for (std::int64_t i : {0, 1, 2, 3, 16, 31}) EXPECT_EQ(values(flat)[i], 7.0) << i;  // outside the segment

  w.zero_grad();
  EXPECT_TRUE(w.grad().shares_storage(flat));
  EXPECT_EQ(values(w.grad()), std::vector<double>(12, 0.0));
  twin.zero_grad();
  backward(loss(w));
  backward(loss(twin));
  EXPECT_TRUE(w.grad().shares_storage(flat));
  EXPECT_EQ(values(view), values(twin.grad()));
}

TEST(BindGrad, Bf16ParameterAccumulatesInItsFloat32View) {
  Tensor w = Tensor::from_vector<float>({1.5f, -2.5f}, {2}).to(DType::bf16).set_requires_grad();
  Tensor view = Tensor::zeros({2}, DType::f32);
  bind_grad(w, view);
  backward(sum(square(to_dtype(w, DType::f32))));  // the CPU backend computes in f32
  EXPECT_EQ(values(view), (std::vector<double>{3, -5}));
}

TEST(BindGrad, ErrorsNameWhatIsWrong) {
  Tensor w = param({3, 4}, 1);
  EXPECT_NE(error_of([&] { bind_grad(w, Tensor::zeros({4, 3})); }).find("gradient view of shape [4, 3] for a parameter of shape [3, 4]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { bind_grad(w, Tensor::zeros({3, 4}, DType::f64)); }).find("gradient view is f64; a f32 parameter accumulates its gradient in f32"),
            std::string::npos)
      << error_of([&] { bind_grad(w, Tensor::zeros({3, 4}, DType::f64)); });
  Tensor bf16 = Tensor::zeros({2}, DType::bf16).set_requires_grad();
  EXPECT_NE(error_of([&] { bind_grad(bf16, Tensor::zeros({2}, DType::bf16)); }).find("in f32"), std::string::npos);
  Tensor non_leaf = mul_scalar(w, 2.0);
  EXPECT_NE(error_of([&] { bind_grad(non_leaf, Tensor::zeros({3, 4})); }).find("is not a leaf"), std::string::npos);
  clear_tape();
  Tensor frozen = Tensor::zeros({3, 4});
  EXPECT_NE(error_of([&] { bind_grad(frozen, Tensor::zeros({3, 4})); }).find("does not require grad"), std::string::npos);
  EXPECT_NE(error_of([&] { bind_grad(w, core::transpose(Tensor::zeros({4, 3}), 0, 1)); }).find("is not contiguous"),
            std::string::npos);
  EXPECT_NE(error_of([&] { on_grad_ready(non_leaf, [] {}); }).find("on_grad_ready: "), std::string::npos);
}

// An op on w whose backward asks twice for w's zeroed gradient buffer (take_zeroed_grad) and
// notes each answer; it writes 2 everywhere, into the buffer when offered.
Tensor probe(const Tensor& w, std::vector<bool>& offered) {
  Tensor y = w.detach().clone();
  record("probe", {w}, {&y}, [&offered, shape = w.shape()](BackwardContext& g) {
    Tensor buffer = g.take_zeroed_grad(0);
    offered.push_back(buffer.defined());
    offered.push_back(g.take_zeroed_grad(0).defined());
    if (buffer.defined()) buffer.fill_(2.0);
    else g.set_input_grad(0, Tensor::full(shape, 2.0));
  });
  return y;
}

TEST(ZeroedGrad, OnlyTheFirstContributionAfterZeroingIsOfferedTheBufferAndOnlyOnce) {
  Tensor w = param({3, 4}, 1);
  Tensor view = Tensor::full({3, 4}, 5.0);
  bind_grad(w, view);
  std::vector<bool> offered;
  backward(sum(probe(w, offered)));  // bound, not known to be zero: added to
  EXPECT_EQ(offered, (std::vector<bool>{false, false}));
  EXPECT_EQ(values(view), std::vector<double>(12, 7.0));

  w.zero_grad();
  offered.clear();
  backward(sum(probe(w, offered)));  // written over the zeros, once
  EXPECT_EQ(offered, (std::vector<bool>{true, false}));
  EXPECT_EQ(values(view), std::vector<double>(12, 2.0));
  offered.clear();
  backward(sum(probe(w, offered)));  // accumulating: added to
  EXPECT_EQ(offered, (std::vector<bool>{false, false}));
  EXPECT_EQ(values(view), std::vector<double>(12, 4.0));

  // Another use's contribution reaches w first (its entry is replayed first): pending, so not offered.
  w.zero_grad();
  offered.clear();
  const Tensor probed = sum(probe(w, offered));
  backward(add(probed, sum(mul_scalar(w, 3.0))));
  EXPECT_EQ(offered, (std::vector<bool>{false, false}));
  EXPECT_EQ(values(view), std::vector<double>(12, 5.0));

  // An owner that zeroes the buffer itself says so; an unbound leaf is never offered anything.
  view.fill_(0.0);
  note_grad_zeroed(w);
  offered.clear();
  backward(sum(probe(w, offered)));
  EXPECT_EQ(offered, (std::vector<bool>{true, false}));
  Tensor unbound = param({3, 4}, 2);
  offered.clear();
  backward(sum(probe(unbound, offered)));
  EXPECT_EQ(offered, (std::vector<bool>{false, false}));
  EXPECT_EQ(values(unbound.grad()), std::vector<double>(12, 2.0));
  EXPECT_NE(error_of([&] { note_grad_zeroed(unbound); }).find("has no bound gradient"), std::string::npos);
}

TEST(ZeroedGrad, AnOpThatTakesTheBufferAndAlsoSetsAGradientIsAnError) {
  Tensor w = param({2}, 1);
  bind_grad(w, Tensor::zeros({2}));
  w.zero_grad();
  Tensor y = w.detach().clone();
  record("greedy", {w}, {&y}, [](BackwardContext& g) {
    g.take_zeroed_grad(0);
    g.set_input_grad(0, Tensor::ones({2}));
  });
  const std::string e = error_of([&] { backward(sum(y)); });
  EXPECT_NE(e.find("greedy backward: input 0 got both its gradient buffer (take_zeroed_grad) and a gradient"),
            std::string::npos) << e;
  clear_tape();
}

// linear, the LM head and the embedding write a zeroed buffer themselves; the tape's pending
// sum added it before. The gradients are the same bits, over gradient accumulation and a
// tied table too (the head writes the buffer, the embedding's rows are added to it).
TEST(ZeroedGrad, WeightGradientsWrittenIntoTheBufferHaveTheBitsOfTheTapesSum) {
  const Tensor x = Tensor::randn({6, 5}, 1), dout = Tensor::randn({6, 4}, 2);  // x: no gradient of its own to add
  const Tensor ids = Tensor::from_vector<std::int64_t>({0, 3, 3, 1, 6, 0}, {6});
  const Tensor targets = Tensor::from_vector<std::int64_t>({2, 6, -100, 0, 1, 1}, {6});
  Tensor w = param({4, 5}, 3), table = param({7, 5}, 4);
  Tensor w_twin = w.detach().clone().set_requires_grad(), table_twin = table.detach().clone().set_requires_grad();
  Tensor flat = Tensor::zeros({64}), twin_flat = Tensor::zeros({64});
  bind_grad(w, core::reshape(core::slice(flat, 0, 0, 20), {4, 5}));
  bind_grad(table, core::reshape(core::slice(flat, 0, 24, 59), {7, 5}));
  note_grad_zeroed(w), note_grad_zeroed(table);
  // The twins take the old road: bound buffers not known to be zero, so each backward sums the
  // contributions (the products' own gradients) and adds the sum to the buffer.
  bind_grad(w_twin, core::reshape(core::slice(twin_flat, 0, 0, 20), {4, 5}));
  bind_grad(table_twin, core::reshape(core::slice(twin_flat, 0, 24, 59), {7, 5}));
  auto loss = [&](const Tensor& weight, const Tensor& emb, bool fused) {
    const Tensor projected = fused ? linear(x, weight) : matmul(x, weight, false, true);
    const Tensor hidden = add(embedding(emb, ids), mul_scalar(x, 0.5));
    return add(sum(mul(projected, dout)), linear_cross_entropy(hidden, emb, targets, -100, 4));
  };
  // Binary kernels of a backward: the tape's additions to buffers, and the head's scaling.
  auto binary_calls = [](const Tensor& root) {
    KernelProfile profile;
    backward(root);
    std::int64_t calls = 0;
    for (const KernelProfile::Row& row : profile.finish()) calls += row.kernel == "binary" ? row.calls : 0;
    return calls;
  };
  for (int micro = 0; micro < 2; ++micro) {
    const std::int64_t fused = binary_calls(loss(w, table, true)), twin = binary_calls(loss(w_twin, table_twin, false));
    // Written, not added: w's gradient, and the head's (scaled into the buffer, not in place first).
    if (micro == 0) EXPECT_EQ(fused, twin - 2);
    else EXPECT_EQ(fused, twin);
    EXPECT_EQ(values(w.grad()), values(w_twin.grad())) << "micro-batch " << micro;
    EXPECT_EQ(values(table.grad()), values(table_twin.grad())) << "micro-batch " << micro;
  }
  EXPECT_EQ(values(flat), values(twin_flat));
}

// ParameterBuffer::cast_values: one cast of the flat buffer, and weight_for hands each
// parameter its slice of it (the same bits as casting the parameter) while the copies live.
TEST(WeightCopies, CastValuesGivesEachParameterItsSliceWhileTheyLive) {
  Tensor a = param({3, 4}, 1), b = param({5}, 2);
  nn::ParameterBuffer buffer({{"a", &a}, {"b", &b}});
  {
    const auto copies = buffer.cast_values(DType::bf16);
    for (const Tensor* p : {&a, &b}) {
      const Tensor w = weight_for("test", *p, DType::bf16, Device::cpu());
      EXPECT_EQ(w.dtype(), DType::bf16);
      EXPECT_EQ(w.shape(), p->shape());
      EXPECT_FALSE(w.shares_storage(*p));
      EXPECT_EQ(values(w), values(p->detach().to(DType::bf16)));
    }
    EXPECT_TRUE(weight_for("test", a, DType::bf16, Device::cpu()).shares_storage(weight_for("test", b, DType::bf16, Device::cpu())));
    Tensor unlisted = param({2}, 3);  // not in the buffer: cast on its own
    EXPECT_EQ(values(weight_for("test", unlisted, DType::bf16, Device::cpu())), values(unlisted.detach().to(DType::bf16)));
    EXPECT_NE(error_of([&] { WeightCopies second; }).find("another one is alive on this thread"), std::string::npos);
  }
  // Gone with the copies: a new cast each time.
  EXPECT_FALSE(weight_for("test", a, DType::bf16, Device::cpu()).shares_storage(weight_for("test", b, DType::bf16, Device::cpu())));
  const std::string e = error_of([&] { weight_for("matmul here", Tensor::zeros({2}, DType::f64), DType::bf16, Device::cpu()); });
  EXPECT_NE(e.find("matmul here: a f64 weight"), std::string::npos) << e;
}

// Matrices side by side at one step in one storage are one batched GEMM operand; anything
// else (apart, out of order, overlapping, of other shapes) is not.
TEST(LinearGroup, UniformBatchStrideTakesOnlyMatricesAtEqualStepsInOrder) {
  const Tensor flat = Tensor::zeros({64});
  const auto at = [&flat](std::int64_t start, std::int64_t rows) {
    return core::reshape(core::slice(flat, 0, start, start + rows * 4), {rows, 4});
  };
  EXPECT_EQ(uniform_batch_stride({at(0, 3), at(12, 3), at(24, 3)}), 12);
  EXPECT_EQ(uniform_batch_stride({at(0, 3), at(16, 3), at(32, 3)}), 16);  // padded between: still one step
  EXPECT_EQ(uniform_batch_stride({at(0, 3)}), 12);
  EXPECT_EQ(uniform_batch_stride({at(12, 3), at(0, 3)}), 0);
  EXPECT_EQ(uniform_batch_stride({at(0, 3), at(8, 3)}), 0);
  EXPECT_EQ(uniform_batch_stride({at(0, 3), at(12, 3), at(28, 3)}), 0);
  EXPECT_EQ(uniform_batch_stride({at(0, 3), at(12, 2)}), 0);
  EXPECT_EQ(uniform_batch_stride({at(0, 3), Tensor::zeros({3, 4})}), 0);
  EXPECT_EQ(uniform_batch_stride({at(0, 3), core::transpose(at(12, 4), 0, 1).contiguous()}), 0);
}

// A gated MLP whose weights live in a ParameterBuffer: gate and up take one batched product
// forward and one for their gradients (written into the zeroed buffer), x's gradient sums
// both products in one accumulator. Against the same MLP built of separate products.
TEST(LinearGroup, AGatedMlpsInputProductsAreBatchedAndGiveTheSeparateProductsGradients) {
  nn::Init init;
  init.std = 0.3;
  nn::GatedMlp mlp(5, 6, nn::MlpKind::swiglu, init.with_name("mlp"), init.with_name("out"));
  nn::ParameterBuffer buffer(mlp.named_parameters());
  const Tensor x0 = Tensor::randn({2, 3, 5}, 9), dout = Tensor::randn({2, 3, 5}, 10);
  Tensor x = x0.clone().set_requires_grad();
  std::vector<Tensor> twins;
  for (const Tensor* w : {mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight})
    twins.push_back(w->detach().clone().set_requires_grad());
  Tensor x_twin = x0.clone().set_requires_grad();
  auto matmul_calls = [](const std::function<Tensor()>& loss) {
    KernelProfile profile;
    backward(loss());
    std::int64_t calls = 0;
    for (const KernelProfile::Row& row : profile.finish()) calls += row.kernel == "matmul" ? row.calls : 0;
    return calls;
  };
  for (int micro = 0; micro < 2; ++micro) {  // into the zeroed buffer, then added to it
    const std::int64_t grouped = matmul_calls([&] { return sum(mul(mlp.forward(x), dout)); });
    const std::int64_t separate = matmul_calls([&] {
      const Tensor gate = matmul(x_twin, twins[0], false, true), up = matmul(x_twin, twins[1], false, true);
      return sum(mul(matmul(swiglu(gate, up), twins[2], false, true), dout));
    });
    // Forward gate + up, and backward their weight gradients (while the buffer is zeroed): one each.
    EXPECT_EQ(grouped, separate - (micro == 0 ? 2 : 1)) << "micro-batch " << micro;
    dark::testing::expect_close(x.grad(), x_twin.grad(), 1e-6, 1e-6, "x, micro-batch " + std::to_string(micro));
    for (std::size_t i = 0; i < twins.size(); ++i) {
      const Tensor* w = i == 0 ? mlp.gate_proj.weight : i == 1 ? mlp.up_proj.weight : mlp.down_proj.weight;
      dark::testing::expect_close(w->grad(), twins[i].grad(), 1e-6, 1e-6,
                                  "weight " + std::to_string(i) + ", micro-batch " + std::to_string(micro));
    }
  }
  buffer.zero_grad();
  clear_tape();
}

// Records, per hooked parameter, each call and a copy of its gradient at that moment.
struct HookLog {
  std::vector<std::string> order;
  std::map<std::string, std::vector<Tensor>> grads_at_call;
  void watch(Tensor& p, const std::string& name) {
    on_grad_ready(p, [this, &p, name] {
      order.push_back(name);
      grads_at_call[name].push_back(p.grad().defined() ? p.grad().clone() : Tensor());
    });
  }
};

TEST(GradReadyHook, FiresOncePerParameterInReverseOrderOfUseWithTheFinalGradient) {
  const Tensor x = Tensor::randn({2, 3}, 1), dout = Tensor::randn({2, 2}, 2);
  Tensor w1 = param({3, 4}, 3), w2 = param({4, 5}, 4), w3 = param({5, 2}, 5);
  HookLog log;
  log.watch(w1, "w1"), log.watch(w2, "w2"), log.watch(w3, "w3");
  bool w1_pending_when_w3_fired = false;
  on_grad_ready(w3, [&] { w1_pending_when_w3_fired = !w1.grad().defined(); });  // fired during, not after, backward
  backward(sum(mul(matmul(matmul(matmul(x, w1), w2), w3), dout)));
  EXPECT_EQ(log.order, (std::vector<std::string>{"w3", "w2", "w1"}));
  EXPECT_TRUE(w1_pending_when_w3_fired);
  for (const auto& [name, p] : std::vector<std::pair<std::string, Tensor*>>{{"w1", &w1}, {"w2", &w2}, {"w3", &w3}}) {
    ASSERT_EQ(log.grads_at_call[name].size(), 1u) << name;
    EXPECT_EQ(values(log.grads_at_call[name][0]), values(p->grad())) << name;
  }
}

TEST(GradReadyHook, AParameterUsedTwiceFiresAfterItsEarliestUseWithTheFullSum) {
  const Tensor x = Tensor::randn({2, 4}, 1), dout = Tensor::randn({2, 4}, 2);
  Tensor w = param({4, 4}, 3), v = param({4, 4}, 4);
  HookLog log;
  log.watch(w, "w"), log.watch(v, "v");
  Tensor w_partial_when_v_fired;
  on_grad_ready(v, [&] { w_partial_when_v_fired = w.grad().clone(); });
  // w is used first (x w) and last (... w): only the late use has been replayed when v fires.
  backward(sum(mul(matmul(matmul(tanh(matmul(x, w)), v), w), dout)));
  EXPECT_EQ(log.order, (std::vector<std::string>{"v", "w"}));
  ASSERT_EQ(log.grads_at_call["w"].size(), 1u);
  EXPECT_EQ(values(log.grads_at_call["w"][0]), values(w.grad()));
  EXPECT_NE(values(w_partial_when_v_fired), values(w.grad()));

  // The full sum: the late use's contribution plus the early use's, from two separate graphs.
  Tensor a = w.detach().clone().set_requires_grad(), b = w.detach().clone().set_requires_grad();
  backward(sum(mul(matmul(matmul(tanh(matmul(x, a)), v.detach()), w.detach()), dout)));
  backward(sum(mul(matmul(matmul(tanh(matmul(x, w.detach())), v.detach()), b), dout)));
  const auto full = values(w.grad()), early = values(a.grad()), late = values(b.grad());
  for (std::size_t i = 0; i < full.size(); ++i)
    EXPECT_NEAR(full[i], early[i] + late[i], 1e-5 * (1 + std::abs(full[i]))) << i;
}

TEST(GradReadyHook, UnreachedParametersGetNoCallAndSkippedEntriesStillFire) {
  const Tensor x = Tensor::randn({2, 3}, 1);
  Tensor w1 = param({3, 3}, 2), w2 = param({3, 3}, 3), unused = param({3, 3}, 4);
  HookLog log;
  log.watch(w1, "w1"), log.watch(w2, "w2"), log.watch(unused, "unused");
  const Tensor side = sum(mul(x, matmul(x, unused)));  // on the tape, but not in the loss's graph
  // An op whose backward passes no gradient: the entry making h is skipped in the replay.
  const Tensor h = matmul(x, w1);
  Tensor blocked = h.detach().clone();
  record_if_needed("block", {h}, {&blocked}, [](BackwardContext&) {});
  backward(sum(matmul(blocked, w2)));
  EXPECT_EQ(log.order, (std::vector<std::string>{"w2", "w1"}));
  EXPECT_FALSE(w1.grad().defined());  // w1 was reached (its hook fired) but got no gradient
  EXPECT_TRUE(log.grads_at_call.count("unused") == 0);
  EXPECT_EQ(tape_size(), 0u);
}

TEST(GradReadyHook, EachBackwardCallFiresAgainWithTheAccumulatedGradient) {
  const Tensor x = Tensor::randn({2, 3}, 1);
  Tensor w1 = param({3, 4}, 2), w2 = param({4, 1}, 3);
  HookLog log;
  log.watch(w1, "w1"), log.watch(w2, "w2");
  std::vector<std::vector<double>> after;
  for (int micro_batch = 0; micro_batch < 2; ++micro_batch) {
    backward(sum(matmul(matmul(x, w1), w2)));
    after.push_back(values(w1.grad()));
  }
  EXPECT_EQ(log.order, (std::vector<std::string>{"w2", "w1", "w2", "w1"}));
  ASSERT_EQ(log.grads_at_call["w1"].size(), 2u);
  EXPECT_EQ(values(log.grads_at_call["w1"][0]), after[0]);
  EXPECT_EQ(values(log.grads_at_call["w1"][1]), after[1]);
}

TEST(GradReadyHook, FiresWhenBackwardStartsFromTheLeafAndStopsWhenRemoved) {
  Tensor w = param({3}, 1);
  int calls = 0;
  std::vector<double> seen;
  GradReadyHandle handle = on_grad_ready(w, [&] { ++calls, seen = values(w.grad()); });
  backward(w, Tensor::from_vector<float>({1, 2, 3}, {3}));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, (std::vector<double>{1, 2, 3}));
  handle.remove();
  handle.remove();  // again: nothing
  backward(sum(square(w)));
  EXPECT_EQ(calls, 1);
}

TEST(GradReadyHook, ParameterBufferFiresEveryEntryOncePerBackwardOnACausalLM) {
  nn::ModelConfig c;
  c.vocab_size = 11, c.d_model = 8, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 1, c.d_ff = 12;
  c.dtype = DType::f32;
  c.init_std = 0.3;
  nn::CausalLM model(c, attention::make_factory({}));  // tied embeddings: embed_tokens is used first and last
  nn::ParameterBuffer buffer(model.named_parameters());
  std::vector<std::string> order;
  std::map<std::string, Tensor> grads_at_call;
  buffer.on_grad_ready([&](const nn::ParameterBuffer::Entry& e) {
    order.push_back(e.name);
    grads_at_call[e.name] = nn::ParameterBuffer::segment(buffer.grads(), e).clone();
  });
  const Tensor tokens = Tensor::from_vector<std::int32_t>({1, 4, 2, 9, 7, 3, 0, 5, 10, 6, 8, 2}, {2, 6});
  for (int micro_batch = 1; micro_batch <= 2; ++micro_batch) {
    backward(model.loss(tokens));
    EXPECT_EQ(order.size(), micro_batch * buffer.entries().size());
    std::map<std::string, int> calls;
    for (const std::string& name : order) ++calls[name];
    for (const auto& e : buffer.entries()) {
      EXPECT_EQ(calls[e.name], micro_batch) << e.name;
      EXPECT_EQ(values(grads_at_call[e.name]), values(nn::ParameterBuffer::segment(buffer.grads(), e))) << e.name;
    }
    EXPECT_EQ(order.back(), "model.embed_tokens.weight");
  }
  EXPECT_GT(buffer.grad_norm(), 0.0);
}

}  // namespace
}  // namespace dark
