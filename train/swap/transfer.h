// Attention transfer (finetune.transfer; docs/method.md, "Attention transfer"): before a
// swapped model is finetuned on the language-model loss, each swapped layer (a layer whose
// kernel is not softmax) is fitted to reproduce its own source's exact attention on the
// source's activations, as Hedgehog and LoLCATs do for linear attention.
//
// Per step, on training.grad_accum training batches per rank:
//   1. the swapped model runs up to its last swapped layer; at each swapped layer the source's
//      exact attention of the layer's input is computed first (train/swap/source_attention.h:
//      frozen copies of the swapped layers' projections), then the layer's own kernel on its
//      own queries, keys and values (its RoPE, QK-norm, GQA, sliding window and exact window),
//      which is scored against it; the layer passes the source's output on, so every layer
//      sees the source's stream and no gradient crosses layers (each layer is its own
//      problem; nothing backpropagates through the model, the LM head never runs);
//   2. loss = the sum over swapped layers of
//        output_weight    x |out - target|^2 / |target|^2 over the layer's batch, and
//        attention_weight x KL(source's attention weights || the kernel's) on
//                           attention_rows sampled query rows (train/swap/attention_weights.h);
//   3. AdamW (nn/optim.h, no weight decay, constant rate) on the parameters
//      finetune.transfer.trainable selects in the swapped layers (the rest does not require
//      grad while the transfer runs).
// Random features are redrawn every finetune.transfer.redraw_interval steps, at feature epochs
// 1, 2, ...: what is fitted is the kernel, not a draw. Epoch 0, the draw finetuning starts
// with, is held out: every "before" and "after" number is measured with it, on
// finetune.transfer.eval_batches validation batches, at fixed, evenly spaced query rows.
// Optional (off by default): window dropout, where a step runs a layer's kernel without its
// exact window with probability window_dropout (falling linearly to 0 over the transfer), so
// that the features must carry the attention the window would (arXiv 2510.05901's scheduled
// sliding-window dropout).
// A layer whose output norm after the transfer is under kCollapsedNorm of its target's is
// reported as collapsed (transfer.json, the console): the fit went silent.
// A step takes the batches training's step would take (train/data_parallel.h); under mpirun
// the gradients are summed over the ranks, so 2 ranks equal one process with twice the
// grad_accum, bit for bit. Memory: the model as loaded, the swapped layers' frozen
// projections, one batch's activations (eval mode) and the trained tensors' gradients and
// moments (train/memory_estimate.h counts them).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/loader.h"
#include "nn/model.h"
#include "train/config.h"
#include "train/dist/communicator.h"
#include "train/evaluate.h"
#include "train/swap/attention_error.h"

namespace dark::train {

// Output norm under this fraction of the target's after the transfer: the layer collapsed.
inline constexpr double kCollapsedNorm = 0.25;

// One swapped layer measured against its source on the held-out batches and draw.
struct LayerFit {
  ErrorSummary error;         // |out - target| / |target| per (batch, position, head): the probe's measure
  double output_error = 0;    // |out - target|^2 / |target|^2 over all rows: the output term's measure
  double attention_kl = 0;    // KL(source's weights || the kernel's), nats, mean over the measured rows
  double norm_ratio = 0;      // |out| / |target| over all rows
  nlohmann::json to_json() const;
  static LayerFit from_json(const nlohmann::json& j);
};

struct LayerTransfer {
  int layer = 0;
  std::string kind;
  LayerFit before, after;
  bool collapsed() const { return after.norm_ratio < kCollapsedNorm; }
};

struct TransferReport {
  std::int64_t steps = 0, tokens_per_step = 0;  // tokens of the global batch
  int ranks = 1;
  double seconds = 0;
  double peak_resident_mib = 0;  // the process's peak resident set when the transfer ended (loading included)
  double first_loss = 0, last_loss = 0;  // the summed loss of the first and last step
  std::vector<std::string> trainable;     // the parameters that trained
  EvalMetrics at_swap;                    // the swapped model's validation metrics before the transfer
  std::vector<LayerTransfer> layers;
  std::int64_t resumed_at = 0;  // the step a saved state continued from (0: from the start)
  bool stopped = false;         // a stop signal ended it early: its state is saved, the report incomplete
  nlohmann::json to_json() const;
};

// Where a transfer keeps its state (train/swap/transfer_state.h) and how it hears of a stop signal.
struct TransferKeeping {
  std::filesystem::path run_dir;          // empty: the state is neither read nor saved
  bool writes = true;                     // this rank saves the state (rank 0 under mpirun)
  std::function<bool()> stop_requested;   // called after each step, the same answer on every rank; may be empty
};

// The parameter-name globs finetune.transfer.trainable stands for (presets expanded).
std::vector<std::string> transfer_globs(const std::vector<std::string>& entries);

// The layers a transfer fits: those whose kernel is not softmax, ascending.
std::vector<int> swapped_layers(nn::CausalLM& model);

// The feature epoch a transfer trains step `step` (0-based) with: 1 + step / redraw_interval
// (1 throughout when the interval is 0). Epoch 0 is held out for the measurements.
std::int64_t transfer_feature_epoch(std::int64_t step, std::int64_t redraw_interval);

// The probability that step `step` (0-based) runs a swapped layer without its exact window:
// finetune.transfer.window_dropout at the first step, falling linearly toward 0 at the last.
double window_dropout_probability(const TransferConfig& transfer, std::int64_t step);

// Fits `model`'s swapped layers (see above) on `loader`'s batches, measuring on `val`'s first
// eval_batches batches. First evaluates the swapped model as it stands on
// training.eval_batches validation batches (the run's own first evaluation, step 0, comes
// after the transfer), so the report holds the language-model cost of the swap itself.
// `model` holds the source's weights and is on its device, and no parameter buffer holds its
// parameters (train/training_run.cpp transfers before it freezes and buffers them); they are
// plain tensors again afterwards, with their requires_grad flags as they were, and every
// kernel's feature epoch 0 (the caller sets the epochs training starts with).
// With keeping.run_dir set, a saved state there continues (the measurements before the first
// step come from it), the state is saved every checkpoint_interval steps and at a stop
// signal (the report then says stopped), and removed at the end. Throws when no layer is
// swapped or the trainable entries select no parameter of a swapped layer.
TransferReport run_transfer(nn::CausalLM& model, const RunConfig& config, const data::BatchSource& loader,
                            const data::BatchSet& val, dist::Communicator& comm, const TransferKeeping& keeping = {});

}  // namespace dark::train
