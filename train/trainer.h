// The training loop of `darkformer train`: data, model, optimizer, schedule; evaluation
// every N steps; metrics.jsonl; checkpoints; bit-exact resume; non-finite step skipping.
//
// Run folder (output.dir):
//   config.json        the fully resolved config (written at the start of a fresh run)
//   metrics.jsonl      one JSON object per logged step / evaluation
//   checkpoints/       step_NNNNNNNN/ (model.safetensors, optimizer.safetensors, state.json)
//   sample.txt         the text generated at the end
//   stability.json     loss spikes, divergence, final/best validation (train/stability.h)
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "data/loader.h"
#include "nn/model.h"
#include "train/checkpoint.h"
#include "train/config.h"

namespace dark::train {

struct EvalMetrics {
  double loss = 0;
  double perplexity = 0;
  double accuracy = 0;  // next-token top-1
  std::int64_t tokens = 0;
};

// Mean loss, perplexity and top-1 accuracy over the first `max_batches` batches (all
// when <= 0) of a validation set, in eval mode and without recording.
EvalMetrics evaluate(nn::CausalLM& model, const data::ValidationSet& val, std::int64_t max_batches);

struct TrainOptions {
  bool resume = false;  // continue from the run folder's latest checkpoint
  // Called before each optimizer step (0-based) with the model: for probes, custom logging
  // and fault injection in tests. Runs outside the tape.
  std::function<void(std::int64_t step, nn::CausalLM& model)> before_step;
};

struct TrainResult {
  std::int64_t steps = 0;
  double final_train_loss = 0;
  EvalMetrics final_eval;
  std::string run_dir;
};

// Copies saved tensors (by parameter name) into the model's parameters; every parameter
// must be present with its shape, and nothing else. Errors start with `source`.
void load_parameters(nn::CausalLM& model, const std::map<std::string, Tensor>& saved, const std::string& source);

// A checkpoint's parameters, untrained attention state (the variance-optimal proposal) and
// the feature epochs of its step, into a model built from `config`.
void load_trained_state(nn::CausalLM& model, const CheckpointData& checkpoint, const RunConfig& config,
                        const std::string& source);

// Runs a whole training run. Throws dark::Error on bad config, data, or checkpoints; a
// fresh run refuses to start in a run folder that already holds checkpoints.
TrainResult train(RunConfig config, const TrainOptions& options);

}  // namespace dark::train
