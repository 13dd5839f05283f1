// Parameter initialisation (nn/init.h): draws are keyed by the parameter's name, and a model
// built under SkipInitialisation, its parameters then loaded, computes exactly what the model
// the parameters came from computes.
#include <gtest/gtest.h>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/init.h"
#include "tests/train_test_util.h"
#include "train/config.h"
#include "train/model_builder.h"
#include "train/training_run.h"

namespace dark::nn::init_test {  // its own namespace: unity batches join test files
namespace {

TEST(Init, SkippingDrawsAllocatesAndTheScopeRestores) {
  const Init init{0.02, 7, "model.layers.0.mlp.up_proj.weight", DType::f32};
  const Tensor drawn = normal_init({4, 3}, init);
  EXPECT_EQ(max(abs(sub(drawn, normal_init({4, 3}, init)))).item(), 0.0);  // the same stream, the same draw
  {
    const SkipInitialisation outer;
    {
      const SkipInitialisation inner;
      const Tensor t = normal_init({4, 3}, init);
      EXPECT_EQ(t.shape(), (Shape{4, 3}));
      EXPECT_EQ(t.dtype(), DType::f32);
    }
    EXPECT_EQ(normal_init({5, 2}, init).shape(), (Shape{5, 2}));  // still skipping: the outer scope is alive
  }
  EXPECT_EQ(max(abs(sub(drawn, normal_init({4, 3}, init)))).item(), 0.0);  // drawing again
}

TEST(Init, AModelBuiltWithoutDrawsComputesTheLoadedModelsOutputs) {
  dark::testing::TempDir tmp;
  train::RunConfig config = train::parse_config(train::tiny_config(tmp, "init", 10));
  config.model.vocab_size = 16;  // a byte tokenizer's data would set it; no data here
  const auto source = train::build_model(config);
  std::map<std::string, Tensor> weights;
  for (auto& [name, p] : source->named_parameters()) weights[name] = p->clone();
  std::unique_ptr<CausalLM> loaded;
  {
    const SkipInitialisation loaded_next;
    loaded = train::build_model(config);
  }
  train::load_parameters(*loaded, weights, "test weights");
  source->train(false);
  loaded->train(false);
  NoGradGuard no_grad;
  const Tensor ids = Tensor::from_vector<std::int32_t>({1, 5, 9, 2, 7, 3}, {1, 6});
  EXPECT_EQ(max(abs(sub(source->forward(ids), loaded->forward(ids)))).item(), 0.0);
}

}  // namespace
}  // namespace dark::nn::init_test
