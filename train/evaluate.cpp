// Validation metrics (see evaluate.h).
#include "train/evaluate.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "train/progress.h"

namespace dark::train {

namespace {

// rank / world: which batches this process takes (b = rank, rank + world, ...); comm sums.
EvalMetrics evaluate_share(nn::CausalLM& model, const data::ValidationSet& val, std::int64_t max_batches, int rank,
                           int world, dist::Communicator* comm) {
  NoGradGuard no_grad;
  const bool was_training = model.training();
  model.train(false);
  const std::int64_t batches = max_batches > 0 ? std::min(max_batches, val.num_batches()) : val.num_batches();
  const std::int64_t V = model.config().vocab_size;
  Tensor loss_sum, correct;  // float64 scalars on the model's device
  std::int64_t count = 0;
  const std::int64_t mine = batches > rank ? (batches - rank + world - 1) / world : 0;  // this rank's batches
  ProgressLog progress("evaluation", "batch", "batches", mine);
  for (std::int64_t b = rank; b < batches; b += world) {
    const Tensor tokens = val.batch(b);
    const std::int64_t B = tokens.size(0), T = tokens.size(1) - 1;
    const Tensor logits = reshape(model.forward(core::slice(tokens, 1, 0, T).contiguous()), {B * T, V});
    const Tensor targets = core::reshape(core::slice(tokens, 1, 1, T + 1).contiguous(), {B * T});
    const Tensor batch_loss = mul_scalar(cross_entropy(logits, targets).to(DType::f64), static_cast<double>(B * T));
    const Tensor hits = sum(eq(argmax(logits), targets.to(DType::i64)).to(DType::f64));
    loss_sum = loss_sum.defined() ? add(loss_sum, batch_loss) : batch_loss;
    correct = correct.defined() ? add(correct, hits) : hits;
    count += B * T;
    progress.update((b - rank) / world + 1);
  }
  model.train(was_training);
  const Device device = model.device();
  if (!loss_sum.defined()) loss_sum = correct = Tensor::zeros({1}, DType::f64, device);  // a rank with no batch
  const Tensor tokens = Tensor::from_vector<double>({static_cast<double>(count)}, {1}).to(device);
  Tensor sums = concat({reshape(loss_sum, {1}), reshape(correct, {1}), tokens}, 0);
  if (comm) comm->all_reduce(sums, dist::ReduceOp::sum);
  const std::vector<double> v = sums.to_vector<double>();
  EvalMetrics m;
  m.tokens = static_cast<std::int64_t>(v[2]);
  if (m.tokens > 0) {
    m.loss = v[0] / v[2];
    m.accuracy = v[1] / v[2];
  }
  m.perplexity = std::exp(m.loss);
  return m;
}

}  // namespace

EvalMetrics evaluate(nn::CausalLM& model, const data::ValidationSet& val, std::int64_t max_batches) {
  return evaluate_share(model, val, max_batches, 0, 1, nullptr);
}

EvalMetrics evaluate(nn::CausalLM& model, const data::ValidationSet& val, std::int64_t max_batches,
                     dist::Communicator& comm) {
  if (comm.world_size() == 1) return evaluate(model, val, max_batches);
  return evaluate_share(model, val, max_batches, comm.rank(), comm.world_size(), &comm);
}

}  // namespace dark::train
