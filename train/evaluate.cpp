// Validation metrics (see evaluate.h).
#include "train/evaluate.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace dark::train {

EvalMetrics evaluate(nn::CausalLM& model, const data::ValidationSet& val, std::int64_t max_batches) {
  NoGradGuard no_grad;
  const bool was_training = model.training();
  model.train(false);
  const std::int64_t batches = max_batches > 0 ? std::min(max_batches, val.num_batches()) : val.num_batches();
  const std::int64_t V = model.config().vocab_size;
  Tensor loss_sum, correct;  // float64 scalars on the model's device
  std::int64_t count = 0;
  for (std::int64_t b = 0; b < batches; ++b) {
    const Tensor tokens = val.batch(b);
    const std::int64_t B = tokens.size(0), T = tokens.size(1) - 1;
    const Tensor logits = reshape(model.forward(core::slice(tokens, 1, 0, T).contiguous()), {B * T, V});
    const Tensor targets = core::reshape(core::slice(tokens, 1, 1, T + 1).contiguous(), {B * T});
    const Tensor batch_loss = mul_scalar(cross_entropy(logits, targets).to(DType::f64), static_cast<double>(B * T));
    const Tensor hits = sum(eq(argmax(logits), targets.to(DType::i64)).to(DType::f64));
    loss_sum = loss_sum.defined() ? add(loss_sum, batch_loss) : batch_loss;
    correct = correct.defined() ? add(correct, hits) : hits;
    count += B * T;
  }
  model.train(was_training);
  EvalMetrics m;
  m.tokens = count;
  if (count > 0) {
    const std::vector<double> sums = concat({reshape(loss_sum, {1}), reshape(correct, {1})}, 0).to_vector<double>();
    m.loss = sums[0] / static_cast<double>(count);
    m.accuracy = sums[1] / static_cast<double>(count);
  }
  m.perplexity = std::exp(m.loss);
  return m;
}

}  // namespace dark::train
