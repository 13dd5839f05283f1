// Attention transfer (finetune.transfer; docs/method.md, "Attention transfer"): before a
// swapped model is finetuned on the language-model loss, each swapped layer (a layer whose
// kernel is not softmax) is fitted to reproduce its own exact attention output on the frozen
// source model's activations, as Hedgehog and LoLCATs do for linear attention.
//
// Per step, on one training batch:
//   1. the frozen model (the run's weights as loaded from finetune.init_from, every layer
//      softmax, no gradient) runs up to the last swapped layer; each swapped layer's kernel
//      output is its target (its own RoPE, QK-norm, GQA and sliding window);
//   2. the swapped model runs up to the same layer; each swapped layer computes its kernel's
//      output on its own queries, keys and values, adds its error to the loss, and passes the
//      target on, so every layer sees the frozen model's inputs and no gradient crosses
//      layers (each layer is its own problem; nothing backpropagates through the model);
//   3. loss = the sum over swapped layers of |out - target|^2 / (|target|^2 + 1e-6) over the
//      layer's whole batch; AdamW on the parameters finetune.transfer.trainable selects in the
//      swapped layers (the rest does not require grad while the transfer runs).
// A step takes training.grad_accum batches on every rank (the batches training's step would
// take, train/data_parallel.h); under mpirun the gradients are summed over the ranks, so 2
// ranks equal one process with twice the grad_accum, bit for bit.
// Random features are redrawn as training redraws them (epoch = step / redraw_interval), so
// what is fitted is the kernel, not one draw. Memory: one batch's activations of the two
// models, never the whole set's. The per-layer error before and after is the probe's measure
// (|out - target| / |target| per position and head) on validation batches at feature epoch 0.
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

namespace dark::train {

struct ErrorSummary {
  double mean = 0, median = 0;
  std::int64_t count = 0;
};

struct LayerTransfer {
  int layer = 0;
  std::string kind;
  ErrorSummary before, after;
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

// Where a transfer keeps its state (train/transfer_state.h) and how it hears of a stop signal.
struct TransferKeeping {
  std::filesystem::path run_dir;          // empty: the state is neither read nor saved
  bool writes = true;                     // this rank saves the state (rank 0 under mpirun)
  std::function<bool()> stop_requested;   // called after each step, the same answer on every rank; may be empty
};

// The parameter-name globs finetune.transfer.trainable stands for (presets expanded).
std::vector<std::string> transfer_globs(const std::vector<std::string>& entries);

// Fits `model`'s swapped layers (see above) on `loader`'s batches 0 .. steps - 1, measuring
// on `val`'s first eval_batches batches. First evaluates the swapped model as it stands on
// training.eval_batches validation batches (the run's own first evaluation, step 0, comes
// after the transfer), so the report holds the language-model cost of the swap itself.
// With keeping.run_dir set, a saved state there continues (the measurements before the first
// step come from it), the state is saved every checkpoint_interval steps and at a stop
// signal (the report then says stopped), and removed at the end. `model` holds the source's weights and is on its
// device; its parameters' requires_grad flags and feature epochs are as they were afterwards
// (the caller sets the epochs training starts with). Throws when no layer is swapped or the
// trainable entries select no parameter of a swapped layer.
TransferReport run_transfer(nn::CausalLM& model, const RunConfig& config, const data::TrainLoader& loader,
                            const data::ValidationSet& val, dist::Communicator& comm, const TransferKeeping& keeping = {});

}  // namespace dark::train
