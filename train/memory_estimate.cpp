// The memory pre-flight's estimate and check (see memory_estimate.h). The activation model
// follows what the ops record (autograd/ops/*.cpp, nn/model.cpp, attention/*.cpp): the tape
// keeps every recorded op's output until backward replays it, plus what the op saves.
#include "train/memory_estimate.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "autograd/ops.h"
#include "core/allocator.h"
#include "nn/optim.h"
#include "nn/parameter_buffer.h"
#include "train/swap/finetune.h"
#include "train/swap/transfer.h"

namespace dark::train {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr std::int64_t kF32 = 4, kIndex = 4;  // f32 statistics and gradients; i32 token ids

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / kMiB; }

// The shape of one run's tensors, in elements, and how a tensor of them is counted.
struct Dims {
  std::int64_t B, T, N, d, f, H, kvH, hd, V;
  std::int64_t act;  // bytes per activation element: 2 in bf16 mixed precision, else 4
  // What is counted of a block: on a GPU the allocator's whole block (round_size: up to an
  // eighth of the next power of two above 1 MiB); on the CPU only the pages a tensor writes,
  // since the peak is the resident set and the rest of a fresh block is never touched
  // (SmolLM2's 513 MiB flat buffers are 640 MiB blocks: 4 of them left 0.5 GiB counted that
  // was never resident).
  bool touched_pages_only;

  // Bytes that `count` tensors of `elements` x `element_bytes` take.
  std::int64_t blocks(std::int64_t count, std::int64_t elements, std::int64_t element_bytes) const {
    if (count <= 0 || elements <= 0) return 0;
    const auto bytes = static_cast<std::size_t>(elements * element_bytes);
    constexpr std::size_t kPage = 4096;
    const std::size_t rounded = CachingAllocator::round_size(bytes);
    return count * static_cast<std::int64_t>(touched_pages_only ? std::min(rounded, (bytes + kPage - 1) / kPage * kPage)
                                                                : rounded);
  }
};

// The attention kind's tensors kept for backward by one layer (forward), and its largest
// backward temporaries.
struct AttentionMemory {
  std::int64_t kept = 0, backward = 0;
};

AttentionMemory attention_memory(const attention::AttentionConfig& a, const Dims& s) {
  using attention::Kind;
  AttentionMemory out;
  const std::int64_t q = s.N * s.H * s.hd, kv = s.N * s.kvH * s.hd;
  if (a.kind == Kind::softmax) {
    // flash_attention saves q, k, v (the RoPE outputs, counted by the block), its output and
    // the per-row log-sum-exp; backward makes dq, dk, dv and a contiguous dout.
    out.kept = s.blocks(1, q, s.act) + s.blocks(1, s.N * s.H, kF32);
    out.backward = s.blocks(2, q, s.act) + s.blocks(2, kv, s.act);
    return out;
  }
  // The transformed queries and keys: performer and lfk scale them (width hd); darkformer
  // projects them with M (width r), one gemm per kv head between two copies when M is per
  // head of several kv heads.
  const std::int64_t r = a.kind == Kind::darkformer && a.darkformer.rank > 0 ? a.darkformer.rank : s.hd;
  const std::int64_t qt = s.N * s.H * r, kt = s.N * s.kvH * r;
  out.kept = s.blocks(1, qt, s.act) + s.blocks(1, kt, s.act);
  if (a.kind == Kind::darkformer && a.darkformer.scope == attention::MatrixScope::head && s.kvH > 1)
    out.kept += s.blocks(1, q, s.act) + s.blocks(1, kv, s.act) + s.blocks(1, qt, s.act) + s.blocks(1, kt, s.act);
  if (a.mode == attention::Mode::exact) {
    // flash attention on the transformed (zero-padded to hd) queries and keys.
    if (r != s.hd) out.kept += s.blocks(1, q, s.act) + s.blocks(1, kv, s.act);
    out.kept += s.blocks(1, q, s.act) + s.blocks(1, s.N * s.H, kF32);
    out.backward = s.blocks(2, q, s.act) + s.blocks(2, kv, s.act);
    return out;
  }
  // random_feature_attention keeps its output and the denominator; its backward makes the
  // feature logits chunk by chunk (kernel scratch, no (N, H, m) tensor) and allocates the
  // gradients of its inputs.
  out.kept += s.blocks(1, q, s.act) + s.blocks(1, s.N * s.H, s.act);
  out.backward = s.blocks(1, q, s.act) + s.blocks(1, qt, s.act) + s.blocks(1, kt, s.act) + s.blocks(1, kv, s.act);
  return out;
}

// One decoder block's tensors kept for backward, and its largest backward temporaries.
struct BlockMemory {
  std::int64_t kept = 0, backward = 0;
};

BlockMemory block_memory(const RunConfig& config, int layer, const Dims& s) {
  const std::int64_t Nd = s.N * s.d, Nkv = s.N * s.kvH * s.hd, Nf = s.N * s.f;
  BlockMemory b;
  // Of width d: two RMSNorm outputs, q and its RoPE, o_proj, two residual adds, down; of the
  // kv width: k and its RoPE, v; of d_ff: gate, up, the GLU; the norms' per-row rstd.
  b.kept = s.blocks(8, Nd, s.act) + s.blocks(3, Nkv, s.act) + s.blocks(3, Nf, s.act) + s.blocks(2, s.N, kF32);
  // Dropout at both sites: its output beside its input, and the kept units, 1 bit each.
  if (config.model.dropout > 0) b.kept += s.blocks(2, Nd, s.act) + s.blocks(2, (Nd + 31) / 32, 4);
  const AttentionMemory a = attention_memory(attention_for_layer(config, layer), s);
  b.kept += a.kept;
  // Backward of the MLP: the incoming gradient, d(glu), d(gate), d(up), the recomputed GLU
  // (written beside them), an input gradient and a weight gradient (f32: written straight into
  // the flat buffer after zero_grad, added from a temporary in later micro-batches); the
  // attention's likewise.
  const std::int64_t mlp = s.blocks(2, Nd, kF32) + s.blocks(4, Nf, kF32) + s.blocks(1, s.f * s.d, kF32);
  b.backward = std::max(mlp, s.blocks(2, Nd, kF32) + a.backward + s.blocks(1, s.d * s.d, kF32));
  return b;
}

// Elements of the flat parameter buffer: 64-byte aligned segments, padded to a multiple of
// shards x kNormChunk (nn/parameter_buffer.h).
std::int64_t flat_numel(const std::vector<std::int64_t>& segments, int shards) {
  std::int64_t n = 0;
  for (const std::int64_t s : segments) n += (s + 15) / 16 * 16;
  const std::int64_t unit = static_cast<std::int64_t>(shards) * nn::ParameterBuffer::kNormChunk;
  return (n + unit - 1) / unit * unit;
}

std::string mib_text(std::int64_t bytes) {
  if (bytes >= std::int64_t{10} << 30) return fmt::format("{:.1f} GiB", mib(bytes) / 1024.0);
  return fmt::format("{:.1f} MiB", mib(bytes));
}

}  // namespace

std::vector<ParameterShape> parameter_shapes(const RunConfig& config) {
  const nn::ModelConfig m = config.model.resolved();
  DARK_CHECK(m.vocab_size > 0, "memory estimate: model.vocab_size is not set yet");
  const std::int64_t d = m.d_model, hd = m.head_size(), kv = static_cast<std::int64_t>(m.n_kv_heads) * hd, f = m.d_ff;
  std::vector<ParameterShape> out = {{"model.embed_tokens.weight", static_cast<std::int64_t>(m.vocab_size) * d}};
  for (int i = 0; i < m.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", d});
    const std::int64_t q = static_cast<std::int64_t>(m.n_heads) * hd;
    for (const auto& [name, numel] : {std::pair{"q_proj", q * d}, {"k_proj", kv * d}, {"v_proj", kv * d}, {"o_proj", d * q}})
      out.push_back({p + "self_attn." + name + ".weight", numel});
    const bool gemma = m.family == nn::ModelFamily::gemma3;
    if (gemma) {
      out.push_back({p + "self_attn.q_norm.weight", hd});
      out.push_back({p + "self_attn.k_norm.weight", hd});
    }
    const attention::AttentionConfig a = attention_for_layer(config, i);
    if (a.kind == attention::Kind::darkformer) {
      const std::int64_t count = a.darkformer.scope == attention::MatrixScope::head ? m.n_kv_heads : 1;
      out.push_back({p + "self_attn.feature_map.M", count * (a.darkformer.rank > 0 ? a.darkformer.rank : hd) * hd});
    } else if (a.kind == attention::Kind::lfk) {
      out.push_back({p + "self_attn.feature_map.W", m.n_kv_heads * a.num_features * hd});
    }
    if (a.window_balance) out.push_back({p + "self_attn.feature_map.window_balance", m.n_heads});
    out.push_back({p + "post_attention_layernorm.weight", d});
    if (gemma) out.push_back({p + "pre_feedforward_layernorm.weight", d});
    out.push_back({p + "mlp.gate_proj.weight", f * d});
    out.push_back({p + "mlp.up_proj.weight", f * d});
    out.push_back({p + "mlp.down_proj.weight", d * f});
    if (gemma) out.push_back({p + "post_feedforward_layernorm.weight", d});
  }
  out.push_back({"model.norm.weight", d});
  if (!m.tie_embeddings) out.push_back({"lm_head.weight", static_cast<std::int64_t>(m.vocab_size) * d});
  return out;
}

namespace {

// The attention transfer's peak beyond the model as built (train/swap/transfer.h): the
// swapped layers' frozen projections, the trained tensors' flat buffer with its gradients and
// AdamW's two moments, and what one micro-batch keeps: in eval mode nothing is recorded but
// in the swapped layers, which keep the trained projections' outputs, their kernel's tensors,
// the output term's difference and the attention-weight term's (B, Hq, rows, T) tensors
// until backward; beside them one block's forward temporaries and, in backward, one layer's
// gradients. The evaluation at the swap comes before all of this (its logits are counted
// with training's).
std::int64_t transfer_peak(const RunConfig& config, const Dims& s, const std::vector<ParameterShape>& shapes) {
  const TransferConfig& tc = config.finetune.transfer;
  const nn::ModelConfig m = config.model.resolved();
  const std::vector<std::string> globs = transfer_globs(tc.trainable);
  std::vector<std::int64_t> trained;
  std::int64_t frozen = 0, kept = 0, layer_backward = 0;
  const std::int64_t R = std::min<std::int64_t>(tc.attention_rows, s.T);
  const std::int64_t q = s.N * s.H * s.hd, kv = s.N * s.kvH * s.hd, rows_by_keys = s.B * s.H * R * s.T;
  for (int i = 0; i < m.n_layers; ++i) {
    const attention::AttentionConfig a = attention_for_layer(config, i);
    if (a.kind == attention::Kind::softmax) continue;
    const std::string prefix = "model.layers." + std::to_string(i) + ".self_attn.";
    bool q_trains = false, k_trains = false;
    for (const ParameterShape& p : shapes) {
      if (!p.name.starts_with(prefix)) continue;
      if (p.name.find(".feature_map.") == std::string::npos) frozen += s.blocks(1, p.numel, kF32);  // the source's copy
      if (!nn::matches_any(p.name, globs)) continue;
      trained.push_back(p.numel);
      q_trains = q_trains || p.name.find(".q_") != std::string::npos;
      k_trains = k_trains || p.name.find(".k_") != std::string::npos;
    }
    const bool gemma = m.family == nn::ModelFamily::gemma3;
    // Projection, QK-norm and RoPE outputs where they train; the kernel's own; the output
    // term's difference and its square.
    kept += (q_trains ? s.blocks(gemma ? 3 : 2, q, s.act) : 0) + (k_trains ? s.blocks(gemma ? 3 : 2, kv, s.act) : 0);
    const AttentionMemory am = attention_memory(a, s);
    kept += am.kept + s.blocks(2, q, s.act);
    // The attention-weight term: about ten (B, Hq, rows, T) tensors, the keys' feature logits
    // and their exponentials.
    const std::int64_t features = a.mode == attention::Mode::exact ? 0 : a.num_features;
    if (tc.attention_weight > 0)
      kept += s.blocks(10, rows_by_keys, s.act) + s.blocks(3, s.N * s.kvH * features, s.act) +
              s.blocks(3, s.B * R * s.H * features, s.act);
    layer_backward = std::max(layer_backward, am.backward + s.blocks(2, q, kF32) +
                                                  (tc.attention_weight > 0 ? s.blocks(6, rows_by_keys, kF32) : 0));
  }
  const std::int64_t flat = flat_numel(trained, 1);
  const std::int64_t buffers = s.blocks(4, flat, kF32);
  // The stream and one block's temporaries while the forward runs (freed block by block).
  std::int64_t block = 0;
  for (int i = 0; i < m.n_layers; ++i) block = std::max(block, block_memory(config, i, s).kept);
  return frozen + buffers + kept + layer_backward + block + s.blocks(2, s.N * s.d, s.act);
}

}  // namespace

std::int64_t fixed_overhead_bytes(Device device) {
  // Measured by scripts/bench_memory.sh (see README "Memory pre-flight"): on the CPU the
  // OpenMP threads' stacks, oneDNN's JIT code and scratch, code paged in after start-up and
  // the allocator's blocks cached by size; on a GPU cuBLAS's workspaces and the allocator's
  // cache beside the context that the free memory already excludes.
  return device.is_cuda() ? std::int64_t{256} << 20 : std::int64_t{24} << 20;
}

MemoryEstimate estimate_memory(const RunConfig& config, const EstimateContext& ctx) {
  const nn::ModelConfig m = config.model.resolved();
  const TrainingConfig& t = config.training;
  MemoryEstimate e;
  e.device = ctx.device;
  const bool bf16 = t.precision == Precision::bf16;
  Dims s{t.batch_size, config.data.seq_len, 0, m.d_model, m.d_ff, m.n_heads, m.n_kv_heads, m.head_size(),
         m.vocab_size, bf16 ? 2 : 4, !ctx.device.is_cuda()};
  s.N = s.B * s.T;

  // ---- parameters, gradients, optimizer state ----
  const std::vector<std::string> globs = trainable_globs(config.finetune.trainable);
  std::vector<std::int64_t> trainable;
  std::int64_t largest_parameter = 0;
  std::int64_t as_built = 0;
  for (const ParameterShape& p : parameter_shapes(config)) {
    e.numel += p.numel;
    largest_parameter = std::max(largest_parameter, s.blocks(1, p.numel, kF32));
    if (ctx.holds_source && !ctx.device.is_cuda()) e.source += s.blocks(1, p.numel, kF32);
    as_built += s.blocks(1, p.numel, kF32);
    e.parameters += s.blocks(1, p.numel, kF32);  // as built; a trainable one's block then stays cached
    if (!nn::matches_any(p.name, globs)) {
      if (bf16 && p.numel > s.d) e.parameters += s.blocks(1, p.numel, 2);  // a frozen weight's bf16 copy on the tape
      continue;
    }
    trainable.push_back(p.numel);
    e.trainable_numel += p.numel;
  }
  const int world = std::max(1, ctx.world_size);
  const std::int64_t flat = flat_numel(trainable, world);
  e.parameters += s.blocks(1, flat, kF32);
  if (bf16) e.parameters += s.blocks(1, flat, 2);  // the step's one bf16 copy of them (ParameterBuffer::cast_values)
  e.gradients = s.blocks(1, flat, kF32);
  const std::int64_t shard = config.distributed.zero_stage == 1 && world > 1 ? flat / world : flat;
  // The trainer's SGD keeps a momentum buffer even at momentum 0 (nn/optim.cpp).
  e.optimizer = s.blocks(config.optimizer.name == nn::OptimizerKind::adamw ? 2 : 1, shard, kF32);

  // ---- activations of one micro-batch and the backward's temporaries ----
  std::int64_t blocks_kept = 0, block_backward = 0, largest_block = 0;
  for (int i = 0; i < m.n_layers; ++i) {
    const BlockMemory b = block_memory(config, i, s);
    blocks_kept += b.kept;
    block_backward = std::max(block_backward, b.backward);
    largest_block = std::max(largest_block, b.kept + b.backward);
  }
  const std::int64_t Nd = s.N * s.d;
  // Token ids and targets, the embedding output, the final norm, the loss's per-row vectors.
  std::int64_t outside = s.blocks(2, s.N, kIndex) + s.blocks(2, Nd, s.act) + s.blocks(4, s.N, kF32);
  // The head (linear_cross_entropy) computes its gradients in the forward, a chunk of rows at
  // a time: dhidden and the weight's gradient in f32 beside one chunk's f32 logits (and their
  // bf16 copy); its backward scales the two and casts dhidden (bf16: one more copy); the
  // weight's stays f32 and goes into the flat buffer (autograd/weights.h).
  const std::int64_t rows = linear_cross_entropy_chunk_rows(0, s.N, s.V);
  // The weight's gradient only where the head trains (a frozen or tied-and-frozen embedding,
  // as in limited-attention finetuning, has none).
  const bool head_trains =
      nn::matches_any(m.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", globs);
  const std::int64_t head_gradients = s.blocks(1, Nd, kF32) + (head_trains ? s.blocks(1, s.V * s.d, kF32) : 0);
  const std::int64_t head_backward =
      head_gradients +
      std::max(s.blocks(1, rows * s.V, kF32) + (bf16 ? s.blocks(1, rows * s.V, 2) : 0), bf16 ? s.blocks(1, Nd, 2) : 0);
  if (t.activation_checkpointing) {
    // Only the block inputs stay; backward recomputes one block at a time.
    e.activations = s.blocks(m.n_layers, Nd, s.act) + outside;
    e.backward = std::max(head_backward, largest_block);
  } else {
    e.activations = blocks_kept + outside;
    e.backward = std::max(head_backward, block_backward);
  }

  // After backward (in blocks of their own, beside the activations' cached ones): the
  // gradient norm squares the flat gradients in f64, a pass of up to 1024 x 4096
  // elements at a time (nn/parameter_buffer.cpp): two f64 temporaries of a pass's size.
  const std::int64_t pass = std::int64_t{1024} * nn::ParameterBuffer::kNormChunk;
  const std::int64_t norm_shard = config.distributed.zero_stage == 1 && world > 1 ? flat / world : flat;
  e.backward += s.blocks(2, std::min(norm_shard, pass), 8) + (norm_shard > pass ? s.blocks(2, norm_shard % pass, 8) : 0);
  // (Clipping scales the flat gradients in place: ParameterBuffer::scale_grads.)

  // ---- data and the process itself ----
  e.data = ctx.data_bytes + s.blocks(1, s.B * (s.T + 1), kIndex);
  e.overhead = (ctx.device.is_cuda() ? 0 : ctx.resident_bytes) + fixed_overhead_bytes(ctx.device);
  if (ctx.device.is_cuda()) e.data = s.blocks(2, s.B * (s.T + 1), kIndex);  // the shards stay in host memory
  // Loading: the model is built (each weight drawn, then scaled into a new tensor) beside the
  // resident source, before either is freed.
  if (e.source > 0) e.loading = e.overhead + e.parameters + largest_parameter;
  // The attention transfer runs after the source is freed and before training buffers the
  // trainable parameters: the model as built, what the transfer adds, the data.
  if (ctx.holds_source && config.finetune.transfer.steps > 0)
    e.transfer = e.overhead - e.source + as_built + e.data + transfer_peak(config, s, parameter_shapes(config));
  return e;
}

std::string MemoryEstimate::breakdown() const {
  std::string text =
      fmt::format("{} on {}: parameters {} ({} of {} training), gradients {}, optimizer state {}, activations {}, "
                  "backward temporaries {}, data {}, overhead {}",
                  mib_text(total()), device.to_string(), mib_text(parameters), trainable_numel, numel,
                  mib_text(gradients), mib_text(optimizer), mib_text(activations), mib_text(backward), mib_text(data),
                  mib_text(overhead));
  if (source > 0)
    text += fmt::format(", less the finetuning source {} once loaded (training {}, loading {})", mib_text(source),
                        mib_text(training()), mib_text(loading));
  if (transfer > 0) text += fmt::format("; the attention transfer before training {}", mib_text(transfer));
  return text;
}

void check_memory_fits(const MemoryEstimate& estimate, const std::optional<MemoryLimit>& limit,
                       const RunConfig& config, std::int64_t resident_bytes) {
  const MemoryCheck mode = config.training.memory_check;
  if (mode == MemoryCheck::off || !limit) return;
  const std::int64_t needed = estimate.total() - (estimate.device.is_cuda() ? 0 : resident_bytes);
  if (needed <= limit->bytes) return;
  const TrainingConfig& t = config.training;
  const std::string message = fmt::format(
      "memory: the run needs about {} (estimate {}) but {} allows {} ({}). Settings that shrink it: training.batch_size "
      "(now {}; raise training.grad_accum, now {}, to keep the global batch), data.seq_len (now {}){}{}, a smaller model "
      "(model.d_model {}, model.n_layers {}, model.vocab_size {}){}; or set training.memory_check to warn or off if "
      "the estimate is wrong",
      mib_text(needed), estimate.breakdown(), estimate.device.to_string(), mib_text(limit->bytes), limit->source,
      t.batch_size, t.grad_accum, config.data.seq_len,
      t.activation_checkpointing ? "" : ", training.activation_checkpointing true",
      estimate.device.is_cuda() && t.precision == Precision::f32 ? ", training.precision bf16" : "", config.model.d_model,
      config.model.n_layers, config.model.vocab_size,
      config.distributed.zero_stage == 0 ? ", distributed.zero_stage 1 on several ranks" : "");
  if (mode == MemoryCheck::warn) {
    spdlog::warn("{} (training.memory_check is warn: going on)", message);
    return;
  }
  throw Error(message);
}

MemoryEstimate memory_preflight(const RunConfig& config, int world_size, Device device, const data::PreparedData& data,
                                bool holds_source) {
  EstimateContext ctx;
  ctx.holds_source = holds_source;
  ctx.world_size = world_size;
  ctx.device = device;
  // Opening a shard verifies its checksum, which reads (and so maps in) all of it.
  for (const std::string& path : {data.train_path, data.val_path}) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (!ec) ctx.data_bytes += static_cast<std::int64_t>(size);
  }
  ctx.resident_bytes = device.is_cuda() ? 0 : resident_bytes();
  const MemoryEstimate estimate = estimate_memory(config, ctx);
  const std::optional<MemoryLimit> limit =
      config.training.memory_check == MemoryCheck::off ? std::nullopt : machine_memory_limit(device);
  spdlog::info("memory: estimated peak {}; limit {}", estimate.breakdown(),
               limit ? fmt::format("{} more ({})", mib_text(limit->bytes), limit->source)
                     : std::string(config.training.memory_check == MemoryCheck::off ? "not checked (training.memory_check off)"
                                                                                    : "unknown"));
  check_memory_fits(estimate, limit, config, ctx.resident_bytes);
  return estimate;
}

void log_memory_peak(const MemoryEstimate& estimate) {
  const std::int64_t live = static_cast<std::int64_t>(allocator_for(estimate.device).stats().peak_bytes_in_use);
  if (estimate.device.is_cuda()) {
    spdlog::info("memory: peak {} of live tensors on {}, estimate {} (ratio {:.2f})", mib_text(live),
                 estimate.device.to_string(), mib_text(estimate.total()),
                 static_cast<double>(estimate.total()) / static_cast<double>(std::max<std::int64_t>(live, 1)));
    return;
  }
  const std::int64_t rss = peak_resident_bytes();
  const AllocatorStats a = allocator_for(estimate.device).stats();
  spdlog::info("memory: peak resident set {} (live tensors at most {} in the last step; the allocator holds {} with "
               "its cache), estimate {} (ratio {:.2f})",
               mib_text(rss), mib_text(live), mib_text(static_cast<std::int64_t>(a.bytes_in_use + a.bytes_cached)),
               mib_text(estimate.total()),
               static_cast<double>(estimate.total()) / static_cast<double>(std::max<std::int64_t>(rss, 1)));
}

}  // namespace dark::train
