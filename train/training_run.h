// A training run's state and its set-up: the resolved config, the data, the model on its
// device, the flat parameter buffer, the optimizer, the loaders and the counters a checkpoint
// keeps. start_run() builds it for the three ways a run starts (fresh, resumed from its last
// checkpoint, finetuned from other weights); save_run() writes its checkpoint. The loop that
// advances it is train() in trainer.h; one optimizer step is train_step() in train_step.h.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/loader.h"
#include "data/mqar.h"
#include "data/prepare.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "nn/parameter_buffer.h"
#include "train/formats/checkpoint.h"
#include "train/config.h"
#include "train/data_parallel.h"
#include "train/dist/communicator.h"
#include "train/memory_estimate.h"
#include "train/run_lock.h"
#include "train/step_graph.h"

namespace dark::train {

struct TrainingRun {
  std::optional<RunLock> lock;               // rank 0: the run folder's writer lock (released last)
  RunConfig config;                          // resolved; model.vocab_size set from the tokenizer
  std::filesystem::path dir;                 // output.dir
  Device device;                             // training.device, resolved (cuda:<local rank> on several GPUs)
  std::unique_ptr<dist::Communicator> comm;  // this process's rank; `single` for a plain process
  data::PreparedData data;                   // data.task text; under mqar empty (no tokenizer, no shards)
  std::unique_ptr<nn::CausalLM> model;       // on `device`, frozen parameters included
  std::unique_ptr<nn::ParameterBuffer> params;  // the trainable parameters and their gradients
  std::unique_ptr<nn::Optimizer> optimizer;
  std::unique_ptr<DataParallel> parallel;       // under mpirun, even with one rank (declared after model: destroyed first)
  std::unique_ptr<data::BatchSource> loader;    // delivers batches on `device`: a TrainLoader, or data.task mqar's source
  std::unique_ptr<data::BatchSet> val;          // a ValidationSet, or data.task mqar's MqarValidationSet
  const data::MqarValidationSet* mqar_val = nullptr;  // data.task mqar: `val` as the task's set (its targets' pairs and distances)
  std::unique_ptr<StepGraph> step_graph;        // training.cuda_graph: the captured passes (train/step_graph.h)
  std::vector<std::int64_t> redraw_intervals;   // per layer
  std::int64_t step = 0;                        // optimizer steps taken
  std::int64_t consecutive_skips = 0, skipped_total = 0;  // non-finite steps
  bool resumed = false;                         // continued from a checkpoint
  bool finetuning = false;                      // finetune.init_from is set
  bool stopped_in_transfer = false;             // a stop signal ended the attention transfer (its state is saved)
  MemoryEstimate memory;                        // the pre-flight's estimate of the peak (train/memory_estimate.h)

  int world_size() const { return comm->world_size(); }
  // Rank 0 alone writes the run folder (config, metrics, checkpoints, stability, samples).
  bool writes() const { return comm->rank() == 0; }
};

// Sets up a run from its config: takes the run folder's lock (rank 0), validates it, prepares the data, builds the model (loading
// the finetuning source's weights or, with `resume`, the latest checkpoint's state), moves it
// to its device, freezes what finetune.trainable leaves out and writes config.json. A fresh
// run refuses a run folder that already holds checkpoints; a resumed one refuses a config
// that differs from the checkpoint's in anything but training.steps, training.device,
// training.grad_accum, distributed and output.dir (and warns when the global batch changes).
// With several ranks (mpirun), every rank runs this: rank 0 alone writes the run folder, and
// the parameters are checked to be identical on every rank.
TrainingRun start_run(RunConfig config, bool resume);

// Whether a stop signal reached this process or, under mpirun, any rank: every rank calls
// this at the same point of every step and gets the same answer.
bool stop_requested(const TrainingRun& run);

// Checkpoints the run at run.step (keeping training.keep_checkpoints of them).
void save_run(TrainingRun& run);

// Copies saved tensors (by parameter name) into the model's parameters; every parameter
// must be present with its shape and dtype, and nothing else. Errors start with `source`.
void load_parameters(nn::CausalLM& model, const std::map<std::string, Tensor>& saved, const std::string& source);

// A checkpoint's parameters, untrained attention state (the variance-optimal proposal) and
// the feature epochs of its step, into a model built from `config`.
void load_trained_state(nn::CausalLM& model, const formats::CheckpointData& checkpoint, const RunConfig& config,
                        const std::string& source);

}  // namespace dark::train
