// Validation metrics (see evaluate.h).
#include "train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "train/progress.h"

namespace dark::train {

namespace {

// Per row of hidden (N, d_model), as final_hidden gives them, and its target (N): the loss
// logsumexp(logits) - logits[target] and the hit argmax(logits) == target, both f64 (N), from
// the logits of a chunk of rows at a time. The logsumexp is cross_entropy's own per-row kernel
// (the one its forward and linear_cross_entropy use), so the numbers are the loss's.
std::pair<Tensor, Tensor> row_losses_and_hits(nn::CausalLM& model, const Tensor& hidden, const Tensor& targets,
                                              std::int64_t logits_per_chunk) {
  const std::int64_t rows = hidden.size(0), vocab = model.config().vocab_size;
  const std::int64_t step = std::clamp<std::int64_t>(logits_per_chunk / vocab, 1, std::max<std::int64_t>(rows, 1));
  const Device device = hidden.device();
  // Row r's offset r * vocab in the flattened logits of a chunk: where its target logit is.
  std::vector<std::int64_t> offsets(step);
  for (std::int64_t r = 0; r < step; ++r) offsets[r] = r * vocab;
  const Tensor row_offsets = Tensor::from_vector(offsets, {step}).to(device);
  const Tensor all_targets = targets.to(DType::i64);
  std::vector<Tensor> losses, hits;
  for (std::int64_t r0 = 0; r0 < rows; r0 += step) {
    const std::int64_t r1 = std::min(rows, r0 + step), n = r1 - r0;
    Tensor logits = model.head_logits(core::slice(hidden, 0, r0, r1).contiguous());
    if (logits.dtype() != grad_dtype(logits.dtype())) logits = logits.to(grad_dtype(logits.dtype()));  // bf16: f32
    logits = logits.contiguous();
    Tensor lse = Tensor::empty({n}, logits.dtype(), device);
    kernels::row_logsumexp().get(device.type, logits.dtype())(logits, lse);
    const Tensor target = core::slice(all_targets, 0, r0, r1).contiguous();
    const Tensor target_logit = index_select(reshape(logits, {n * vocab}), 0, add(core::slice(row_offsets, 0, 0, n), target));
    losses.push_back(sub(lse, target_logit).to(DType::f64));
    hits.push_back(eq(argmax(logits), target).to(DType::f64));
  }
  if (losses.empty()) return {Tensor::zeros({0}, DType::f64, device), Tensor::zeros({0}, DType::f64, device)};
  return {losses.size() == 1 ? losses[0] : concat(losses, 0), hits.size() == 1 ? hits[0] : concat(hits, 0)};
}

// rank / world: which batches this process takes (b = rank, rank + world, ...); comm sums.
EvalMetrics evaluate_share(nn::CausalLM& model, const data::BatchSet& val, std::int64_t max_batches, int rank,
                           int world, dist::Communicator* comm, std::int64_t logits_per_chunk) {
  NoGradGuard no_grad;
  const EvalMode eval_mode(model);
  const std::int64_t batches = max_batches > 0 ? std::min(max_batches, val.num_batches()) : val.num_batches();
  const std::int64_t mine = batches > rank ? (batches - rank + world - 1) / world : 0;  // this rank's batches
  const Device device = model.device();
  // Per input position: summed losses and hits (f64 on the model's device) and tokens.
  Tensor position_loss, position_hits, position_counts;
  std::int64_t positions = -1;  // T, once a batch is seen
  ProgressLog progress("evaluation", "batch", "batches", mine);
  for (std::int64_t b = rank; b < batches; b += world) {
    const Tensor tokens = val.batch(b);
    const std::int64_t B = tokens.size(0), T = tokens.size(1) - 1;
    DARK_CHECK(positions < 0 || positions == T,
               "evaluate: validation batch ", b, " has windows of ", T, " positions, the earlier ones ",
               positions);
    const Tensor inputs = core::slice(tokens, 1, 0, T).contiguous();
    const Tensor marked = core::reshape(core::slice(tokens, 1, 1, T + 1).contiguous(), {B * T});
    // Targets marked unscored (nn/model.h, scored_targets) count nowhere: weight 0.
    const Tensor targets = nn::unscored_as_ids(marked);
    const Tensor scored = eq(targets, marked).to(DType::f64);
    const Tensor hidden = reshape(model.final_hidden(inputs), {B * T, model.config().d_model});
    const auto [loss, hit] = row_losses_and_hits(model, hidden, targets, logits_per_chunk);
    const Tensor batch_loss = sum(reshape(mul(loss, scored), {B, T}), {0}),
                 batch_hits = sum(reshape(mul(hit, scored), {B, T}), {0}),
                 batch_tokens = sum(reshape(scored, {B, T}), {0});
    position_loss = position_loss.defined() ? add(position_loss, batch_loss) : batch_loss;
    position_hits = position_hits.defined() ? add(position_hits, batch_hits) : batch_hits;
    position_counts = position_counts.defined() ? add(position_counts, batch_tokens) : batch_tokens;
    positions = T;
    progress.update((b - rank) / world + 1);
  }
  // Every rank sums the same number of positions: a rank with no batch (more ranks than
  // batches) takes the windows' length from the first batch, its sums zeros.
  const std::int64_t T = positions >= 0 ? positions : batches > 0 ? val.batch(0).size(1) - 1 : 0;
  if (!position_loss.defined()) position_loss = position_hits = position_counts = Tensor::zeros({T}, DType::f64, device);
  Tensor sums = concat({position_loss, position_hits, position_counts}, 0);
  if (comm) comm->all_reduce(sums, dist::ReduceOp::sum);
  const std::vector<double> v = sums.to_vector<double>();
  const std::vector<double> loss_sums(v.begin(), v.begin() + T), hit_sums(v.begin() + T, v.begin() + 2 * T),
      token_counts(v.begin() + 2 * T, v.end());
  EvalMetrics m;
  double loss = 0, hits = 0, tokens = 0;
  for (std::int64_t t = 0; t < T; ++t) loss += loss_sums[t], hits += hit_sums[t], tokens += token_counts[t];
  m.tokens = static_cast<std::int64_t>(tokens);
  if (m.tokens > 0) {
    m.loss = loss / tokens;
    m.accuracy = hits / tokens;
  }
  m.perplexity = std::exp(m.loss);
  m.by_position = metrics::bucket_positions(loss_sums, hit_sums, token_counts);
  return m;
}

}  // namespace

EvalMetrics evaluate(nn::CausalLM& model, const data::BatchSet& val, std::int64_t max_batches,
                     std::int64_t logits_per_chunk) {
  return evaluate_share(model, val, max_batches, 0, 1, nullptr, logits_per_chunk);
}

EvalMetrics evaluate(nn::CausalLM& model, const data::BatchSet& val, std::int64_t max_batches,
                     dist::Communicator& comm) {
  if (comm.world_size() == 1) return evaluate(model, val, max_batches);
  return evaluate_share(model, val, max_batches, comm.rank(), comm.world_size(), &comm, kEvalLogitsPerChunk);
}

}  // namespace dark::train
