// The memory pre-flight: before the model is allocated, the peak memory of a training run is
// estimated from its config and compared with what the machine allows (train/memory_limit.h);
// a run that cannot fit is refused with the estimate, the limit and the settings that would
// shrink it, instead of being killed by the kernel's OOM killer after filling the machine.
// training.memory_check sets what happens above the limit: error (default), warn or off.
//
// What is counted, each tensor as the caching allocator rounds it on a GPU (core/allocator.h)
// and as the pages it writes on the CPU (the rest of a block is never resident):
// - parameters: every parameter as built, and the flat f32 buffer the trainable ones move
//   into (the blocks they leave stay in the allocator's cache); bf16 keeps a bf16 copy of
//   each weight on the tape;
// - gradients: the flat f32 gradient buffer of the trainable parameters (frozen: none);
// - optimizer: AdamW's two moments, SGD's momentum, per trainable parameter, sharded over
//   the ranks under ZeRO stage 1;
// - activations: what the tape keeps for backward for one micro-batch (every recorded op's
//   output lives until backward replays it): per decoder block the norms, projections, RoPE
//   outputs, the attention kind's tensors (softmax: flash attention's O(L) statistics;
//   performer / lfk / darkformer: the transformed queries and keys, the output and the
//   denominator of the chunked random-feature op) and the gated MLP; with
//   training.activation_checkpointing only the block inputs plus one block recomputed in
//   backward;
// - backward: the largest set of temporaries alive at once at the end of the forward or in
//   backward (the head's chunk of logits and its two gradients, which it computes in the
//   forward; or a block's input and weight gradients, the random-feature logits recomputed
//   there);
// - data: the token shards (memory-mapped: their pages count once read) and the batches;
// - overhead: what the process already holds (code, libraries, the tokenizer, a loaded
//   checkpoint; measured as its resident set when the estimate is made) plus a fixed
//   allowance for threads, oneDNN's scratch and JIT code and the caching allocator's
//   fragmentation, measured by scripts/bench_memory.sh.
// Finetuning from a source (finetune.init_from, not a resume): the source's tensors are
// resident when the estimate is made and are handed back to the system once the model
// holds its weights (release_cached_host_memory), so the peak is the largest of loading
// (what is resident, plus the model as built, plus the initialisation's temporary of its
// largest parameter), the attention transfer when there is one (the model as built, the
// swapped layers' frozen projections, the trained tensors' buffers and one micro-batch's
// tape through the swapped layers; train/swap/transfer.h) and training (everything above,
// less the source).
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "data/prepare.h"
#include "train/config.h"
#include "train/memory_limit.h"

namespace dark::train {

// One parameter tensor the model will have (name as nn::Module names it, element count).
struct ParameterShape {
  std::string name;
  std::int64_t numel = 0;
};
// The parameters build_model(config) creates, in its order, without building it
// (config resolved, model.vocab_size set).
std::vector<ParameterShape> parameter_shapes(const RunConfig& config);

// What the estimate needs beyond the config.
struct EstimateContext {
  int world_size = 1;
  Device device = Device::cpu();
  std::int64_t data_bytes = 0;      // bytes of the memory-mapped token shards (train + val)
  std::int64_t resident_bytes = 0;  // what the process holds already (CPU: its resident set)
  bool holds_source = false;        // a finetuning source is loaded (part of resident_bytes)
};

struct MemoryEstimate {
  std::int64_t parameters = 0, gradients = 0, optimizer = 0, activations = 0, backward = 0, data = 0, overhead = 0;
  std::int64_t numel = 0, trainable_numel = 0;  // parameters, and those that train
  // CPU, finetuning from a source: its bytes (in overhead while loading, freed for training)
  // and the peak while the model is built beside it; 0 otherwise.
  std::int64_t source = 0, loading = 0;
  // Finetuning with finetune.transfer (from a source): the peak while the transfer runs
  // (train/swap/transfer.h), before training's buffers exist; 0 otherwise.
  std::int64_t transfer = 0;
  Device device = Device::cpu();
  std::int64_t training() const {
    return parameters + gradients + optimizer + activations + backward + data + overhead - source;
  }
  std::int64_t total() const { return std::max({training(), loading, transfer}); }
  // "412.3 MiB: parameters 25.5 MiB, gradients 12.8 MiB, ..." (one line, for logs and errors).
  std::string breakdown() const;
};

// The fixed allowance (threads, oneDNN, fragmentation) added to the resident set on the CPU,
// and to the CUDA context's share on a GPU.
std::int64_t fixed_overhead_bytes(Device device);

// Estimates the peak memory of training `config` (resolved, validated, vocab_size set) on
// ctx.device: a pure function of its arguments.
MemoryEstimate estimate_memory(const RunConfig& config, const EstimateContext& ctx);

// Compares the estimate with the limit: nothing when it fits or training.memory_check is
// off; above the limit a warning (warn) or a dark::Error (error) that gives the estimate and
// its breakdown, the limit and where it came from, and the settings that shrink it. On the
// CPU only what is still to be allocated (the estimate less ctx.resident_bytes, which the
// limit already excludes) is compared.
void check_memory_fits(const MemoryEstimate& estimate, const std::optional<MemoryLimit>& limit,
                       const RunConfig& config, std::int64_t resident_bytes);

// The pre-flight of start_run: estimates, logs the estimate and the limit, checks. Returns
// the estimate (logged again beside the measured peak at the end of the run).
// holds_source: a finetuning source is loaded (EstimateContext::holds_source).
MemoryEstimate memory_preflight(const RunConfig& config, int world_size, Device device, const data::PreparedData& data,
                                bool holds_source);

// The end-of-run line: the estimate beside the measured peak (CPU: the process's peak
// resident set; both: the caching allocator's peak of live tensors) and their ratio.
void log_memory_peak(const MemoryEstimate& estimate);

}  // namespace dark::train
