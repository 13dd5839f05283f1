// Device placement above core: training.device and its resolution, Module::to (every
// parameter, frozen ones included, keeping requires_grad), loaders delivering batches on a
// device, and evaluation that keeps its sums where the logits are, checked against a host
// loop over the full logits. The GPU cases skip (visibly) on a machine without a GPU, and run
// on the CPU in test_device_placement_emulated (the CUDA emulator).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "attention/factory.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/backend.h"
#include "data/loader.h"
#include "nn/model.h"
#include "nn/parameter_buffer.h"
#include "test_util.h"
#include "train/config.h"
#include "train/device_setting.h"
#include "train/evaluate.h"

namespace dark::train {
namespace {

using dark::testing::error_of;
using dark::testing::TempDir;

nn::ModelConfig tiny_model() {
  nn::ModelConfig m;
  m.vocab_size = 19;
  m.d_model = 16;
  m.n_layers = 2;
  m.n_heads = 2;
  m.d_ff = 32;
  m.init_std = 0.4;  // confident enough that top-1 accuracy is neither 0 nor 1
  m.seed = 11;
  return m;
}

std::unique_ptr<nn::CausalLM> tiny_darkformer() {
  attention::AttentionConfig a;
  a.kind = attention::Kind::darkformer;
  a.num_features = 8;
  return std::make_unique<nn::CausalLM>(tiny_model(), attention::make_factory(a));
}

TEST(TrainingDevice, ConfigKeyAcceptsCpuCudaIndexAndAuto) {
  EXPECT_EQ(parse_config(nlohmann::json::object()).training.device, "cpu");
  for (const char* value : {"cpu", "cuda", "cuda:1", "auto"})
    EXPECT_EQ(parse_config({{"training", {{"device", value}}}}).training.device, value);
  EXPECT_EQ(error_of([] { parse_config({{"training", {{"device", "tpu"}}}}); }),
            R"(config: training.device: "tpu" is not one of cpu, cuda, cuda:N (N >= 0), auto)");
  EXPECT_EQ(error_of([] { parse_config({{"training", {{"device", "cuda:-1"}}}}); }),
            R"(config: training.device: "cuda:-1" is not one of cpu, cuda, cuda:N (N >= 0), auto)");
}

TEST(TrainingDevice, ResolvesToAUsableDeviceOrSaysWhyNot) {
  EXPECT_EQ(resolve_device("cpu"), Device::cpu());
  if (cuda_available()) {
    EXPECT_EQ(resolve_device("auto"), Device::cuda(0));
    EXPECT_EQ(resolve_device("cuda"), Device::cuda(0));
    const std::string past = "cuda:" + std::to_string(cuda_device_count());
    EXPECT_NE(error_of([&] { resolve_device(past); }).find("does not exist"), std::string::npos);
    return;
  }
  EXPECT_EQ(resolve_device("auto"), Device::cpu());
  for (const char* setting : {"cuda", "cuda:0", "cuda:3"}) {
    const std::string e = error_of([&] { resolve_device(setting); });
#ifdef DARK_WITH_CUDA
    EXPECT_NE(e.find("no GPU"), std::string::npos) << e;
#else
    EXPECT_NE(e.find("no CUDA backend"), std::string::npos) << e;
#endif
    EXPECT_EQ(e.rfind("config: training.device: \"" + std::string(setting) + "\": ", 0), 0u) << e;
  }
}

TEST(ModuleTo, TheCpuIsANoOpThatKeepsEveryTensor) {
  auto model = tiny_darkformer();
  std::vector<Tensor> before;
  for (auto& [name, p] : model->named_parameters()) before.push_back(*p);
  model->to(Device::cpu());
  EXPECT_EQ(model->device(), Device::cpu());
  std::size_t i = 0;
  for (auto& [name, p] : model->named_parameters()) {
    EXPECT_TRUE(p->shares_storage(before[i])) << name;
    EXPECT_TRUE(p->requires_grad()) << name;
    ++i;
  }
}

TEST(ModuleTo, MovesEveryParameterFrozenOnesIncludedAndKeepsRequiresGrad) {
  DARK_REQUIRE_GPU();
  auto model = tiny_darkformer();
  auto params = model->named_parameters();
  Tensor* frozen = params.front().second;  // the embedding
  frozen->set_requires_grad(false);
  std::vector<std::vector<double>> values_before;
  for (auto& [name, p] : params) values_before.push_back(dark::testing::values(*p));
  model->to(Device::cuda(0));
  EXPECT_EQ(model->device(), Device::cuda(0));
  std::size_t i = 0;
  for (auto& [name, p] : model->named_parameters()) {
    EXPECT_EQ(p->device(), Device::cuda(0)) << name;
    EXPECT_EQ(p->requires_grad(), p != frozen) << name;
    EXPECT_EQ(dark::testing::values(*p), values_before[i]) << name;
    ++i;
  }
  std::vector<std::pair<std::string, Tensor*>> trainable(params.begin() + 1, params.end());
  const nn::ParameterBuffer buffer(trainable);
  EXPECT_EQ(buffer.values().device(), Device::cuda(0));
  EXPECT_EQ(buffer.grads().device(), Device::cuda(0));
  model->to(Device::cpu());  // and back
  for (auto& [name, p] : model->named_parameters()) EXPECT_EQ(p->device(), Device::cpu()) << name;
}

// A shard of `n` tokens below `vocab` in a fixed pseudo-random order.
std::shared_ptr<const data::TokenShard> token_shard(const TempDir& tmp, std::int32_t n, std::int32_t vocab) {
  const std::string path = tmp / "tokens.bin";
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i) ids[i] = static_cast<std::int32_t>((i * 7 + (i * i) % 5) % vocab);
  data::ShardWriter w(path, "test", vocab);
  w.append_document(ids);
  w.finish();
  return data::TokenShard::open(path, "test");
}

TEST(Loaders, DeliverBatchesOnTheCpu) {
  TempDir tmp;
  const auto shard = token_shard(tmp, 400, 19);
  data::LoaderOptions o;
  o.batch_size = 3;
  o.seq_len = 8;
  EXPECT_EQ(data::TrainLoader(shard, o).batch(0).device(), Device::cpu());
  EXPECT_EQ(data::ValidationSet(shard, 3, 8, 0, Device::cpu()).batch(0).device(), Device::cpu());
}

TEST(Loaders, DeliverBatchesOnTheGpuWithTheCpusTokens) {
  DARK_REQUIRE_GPU();
  TempDir tmp;
  const auto shard = token_shard(tmp, 400, 19);
  data::LoaderOptions o;
  o.batch_size = 3;
  o.seq_len = 8;
  const data::TrainLoader on_cpu(shard, o);
  o.device = Device::cuda(0);
  const data::TrainLoader on_gpu(shard, o);
  for (std::int64_t b : {0, 2, 7}) {
    const Tensor batch = on_gpu.batch(b);
    EXPECT_EQ(batch.device(), Device::cuda(0)) << "batch " << b;
    EXPECT_EQ(batch.to(Device::cpu()).to_vector<std::int32_t>(), on_cpu.batch(b).to_vector<std::int32_t>()) << "batch " << b;
  }
  const data::ValidationSet val_cpu(shard, 3, 8, 0, Device::cpu()), val_gpu(shard, 3, 8, 0, Device::cuda(0));
  ASSERT_EQ(val_gpu.num_batches(), val_cpu.num_batches());
  ASSERT_GT(val_cpu.num_batches(), 1);
  for (std::int64_t b = 0; b < val_cpu.num_batches(); ++b) {
    const Tensor batch = val_gpu.batch(b);
    EXPECT_EQ(batch.device(), Device::cuda(0)) << "validation batch " << b;
    EXPECT_EQ(batch.to(Device::cpu()).to_vector<std::int32_t>(), val_cpu.batch(b).to_vector<std::int32_t>())
        << "validation batch " << b;
  }
}

// The reference: full logits on the host, log-sum-exp and the first largest logit per row.
EvalMetrics host_evaluate(nn::CausalLM& model, const data::ValidationSet& val) {
  NoGradGuard no_grad;
  model.train(false);
  const std::int64_t V = model.config().vocab_size;
  double loss_sum = 0;
  std::int64_t correct = 0, count = 0;
  for (std::int64_t b = 0; b < val.num_batches(); ++b) {
    const std::vector<std::int32_t> tokens = val.batch(b).to_vector<std::int32_t>();
    const Tensor batch = val.batch(b);
    const std::int64_t B = batch.size(0), T = batch.size(1) - 1;
    const std::vector<float> logits =
        model.forward(core::slice(batch, 1, 0, T).contiguous()).to(Device::cpu()).to_vector<float>();
    for (std::int64_t row = 0; row < B * T; ++row) {
      const float* l = logits.data() + row * V;
      const std::int32_t target = tokens[(row / T) * (T + 1) + row % T + 1];
      double top = l[0];
      for (std::int64_t v = 1; v < V; ++v) top = std::max(top, static_cast<double>(l[v]));
      double z = 0;
      for (std::int64_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(l[v]) - top);
      loss_sum += top + std::log(z) - l[target];
      correct += std::max_element(l, l + V) - l == target;
      ++count;
    }
  }
  model.train(true);
  EvalMetrics m;
  m.tokens = count;
  m.loss = loss_sum / static_cast<double>(count);
  m.accuracy = static_cast<double>(correct) / static_cast<double>(count);
  m.perplexity = std::exp(m.loss);
  return m;
}

void expect_metrics_match(const EvalMetrics& got, const EvalMetrics& want, const std::string& where) {
  EXPECT_EQ(got.tokens, want.tokens) << where;
  EXPECT_NEAR(got.loss, want.loss, 1e-5) << where;  // float32 logits and kernel, float64 reference
  EXPECT_NEAR(got.perplexity, want.perplexity, 1e-4 * want.perplexity) << where;
  EXPECT_DOUBLE_EQ(got.accuracy, want.accuracy) << where;
}

TEST(Evaluate, KeepsItsSumsOnTheDeviceAndMatchesAHostLoop) {
  TempDir tmp;
  const auto shard = token_shard(tmp, 700, 19);
  auto model = tiny_darkformer();
  const data::ValidationSet val(shard, 4, 12, 11);  // 11 windows: a last batch of 3 rows
  const EvalMetrics want = host_evaluate(*model, val);
  EXPECT_GT(want.accuracy, 0.0);
  EXPECT_LT(want.accuracy, 1.0);
  expect_metrics_match(evaluate(*model, val, 0), want, "cpu");
  EXPECT_TRUE(model->training());  // the mode is restored
  EXPECT_EQ(evaluate(*model, val, 1).tokens, 4 * 12);
}

// On the GPU: the device-side sums against the host loop over the GPU's own logits, and against
// the CPU's (the logits differ by float32 rounding only: the same bounds hold).
TEST(Evaluate, OnTheGpuKeepsItsSumsOnTheDeviceAndMatchesTheCpu) {
  DARK_REQUIRE_GPU();
  TempDir tmp;
  const auto shard = token_shard(tmp, 700, 19);
  auto model = tiny_darkformer();
  const data::ValidationSet val(shard, 4, 12, 11);  // 11 windows: a last batch of 3 rows
  const EvalMetrics cpu = host_evaluate(*model, val);
  model->to(Device::cuda(0));
  const data::ValidationSet val_gpu(shard, 4, 12, 11, Device::cuda(0));
  const EvalMetrics got = evaluate(*model, val_gpu, 0);
  EXPECT_TRUE(model->training());  // the mode is restored
  expect_metrics_match(got, host_evaluate(*model, val_gpu), "cuda against a host loop over its logits");
  expect_metrics_match(got, cpu, "cuda against the cpu");
  EXPECT_EQ(evaluate(*model, val_gpu, 1).tokens, 4 * 12);
}

}  // namespace
}  // namespace dark::train
