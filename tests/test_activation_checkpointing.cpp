// Activation checkpointing (autograd/checkpoint.h, training.activation_checkpointing): the
// loss and every gradient equal an unchecked run's bit for bit (parameters bound to a flat
// gradient buffer, dropout, a random-feature kind, a frozen parameter), each gradient-ready
// hook fires once, less memory is held between forward and backward, and a whole training
// run gives the same loss curve with it on and off.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "attention/factory.h"
#include "autograd/checkpoint.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "nn/model.h"
#include "nn/parameter_buffer.h"
#include "test_util.h"
#include "train/config.h"
#include "train/trainer.h"
#include "train_test_util.h"

namespace dark {
namespace {

using dark::testing::TempDir;

std::unique_ptr<nn::CausalLM> model(attention::Kind kind, int exact_window) {
  nn::ModelConfig m;
  m.vocab_size = 37, m.d_model = 32, m.n_layers = 3, m.n_heads = 4, m.n_kv_heads = 2, m.d_ff = 64, m.dropout = 0.1;
  m.seed = 5;
  attention::AttentionConfig a;
  a.kind = kind;
  a.num_features = 16;
  a.chunk_size = 8;
  a.exact_window = exact_window;
  return std::make_unique<nn::CausalLM>(m, attention::make_factory(a));
}

Tensor tokens() {
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 2 * 41; ++i) ids.push_back((i * 17 + 3) % 37);
  return Tensor::from_vector(ids, {2, 41});
}

struct Result {
  double loss;
  std::vector<float> grads;
  std::map<std::string, int> hook_calls;
};

Result run(attention::Kind kind, bool checkpointing, int exact_window = 0) {
  auto lm = model(kind, exact_window);
  lm->activation_checkpointing = checkpointing;
  std::vector<std::pair<std::string, Tensor*>> trainable;
  for (auto& [name, p] : lm->named_parameters())
    if (name.find("layers.1.mlp.up_proj") != std::string::npos) p->set_requires_grad(false);  // frozen
    else trainable.emplace_back(name, p);
  nn::ParameterBuffer buffer(trainable);
  Result r;
  buffer.on_grad_ready([&](const nn::ParameterBuffer::Entry& e) { ++r.hook_calls[e.name]; });
  const Tensor loss = lm->loss(tokens(), 7);
  r.loss = loss.item();
  backward(loss);
  r.grads = buffer.grads().to_vector<float>();
  return r;
}

TEST(ActivationCheckpointing, LossAndGradientsAreBitIdentical) {
  for (attention::Kind kind : {attention::Kind::softmax, attention::Kind::darkformer, attention::Kind::lfk}) {
    const Result plain = run(kind, false), checked = run(kind, true);
    EXPECT_EQ(plain.loss, checked.loss) << enum_name(kind);
    EXPECT_EQ(plain.grads, checked.grads) << enum_name(kind);
    EXPECT_EQ(plain.hook_calls, checked.hook_calls) << enum_name(kind);
    for (const auto& [name, calls] : checked.hook_calls) EXPECT_EQ(calls, 1) << name;
    EXPECT_EQ(tape_size(), 0u);
  }
  // The exact window's ops (flash with its logsumexp, the far part, the merge) recompute alike.
  const Result plain = run(attention::Kind::darkformer, false, 9), checked = run(attention::Kind::darkformer, true, 9);
  EXPECT_EQ(plain.loss, checked.loss) << "darkformer, exact window 9";
  EXPECT_EQ(plain.grads, checked.grads) << "darkformer, exact window 9";
}

TEST(ActivationCheckpointing, KeepsLessBetweenForwardAndBackward) {
  auto held = [](bool checkpointing) {
    auto lm = model(attention::Kind::softmax, 0);
    lm->activation_checkpointing = checkpointing;
    CachingAllocator& alloc = allocator_for(Device::cpu());
    const std::size_t before = alloc.stats().bytes_in_use;
    const Tensor loss = lm->loss(tokens(), 1);
    const std::size_t bytes = alloc.stats().bytes_in_use - before;
    clear_tape();
    return bytes;
  };
  const std::size_t plain = held(false), checked = held(true);
  EXPECT_LT(checked * 2, plain) << "checkpointed " << checked << " bytes, plain " << plain;
}

TEST(ActivationCheckpointing, WithoutGradModeItIsJustTheFunction) {
  const Tensor x = Tensor::randn({3}, 1).set_requires_grad(true);
  NoGradGuard no_grad;
  const Tensor y = checkpoint([](const std::vector<Tensor>& in) { return mul_scalar(in[0], 2.0); }, {x}, {});
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(tape_size(), 0u);
}

TEST(ActivationCheckpointing, ATrainingRunHasTheSameLossCurve) {
  TempDir tmp;
  auto config = train::tiny_config(tmp, "plain", 12);
  train::train(train::parse_config(config), {});
  config["output"]["dir"] = (tmp.path() / "checked").string();
  config["training"]["activation_checkpointing"] = true;
  train::train(train::parse_config(config), {});
  EXPECT_EQ(train::losses(tmp.path() / "plain"), train::losses(tmp.path() / "checked"));
}

}  // namespace
}  // namespace dark
