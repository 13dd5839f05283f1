// An attention transfer's state between two of its steps (train/swap/transfer.h), so that a stopped
// transfer continues where it stopped (`darkformer train --resume`) instead of starting over.
// Saved every finetune.transfer.checkpoint_interval steps and when a stop signal arrives, in
// <run>/transfer/checkpoints/step_<N>/ (the checkpoint format of train/formats/checkpoint.h,
// so it is written atomically and checksummed; the newest is kept):
//   model.safetensors      the tensors the transfer trains, by parameter name
//   optimizer.safetensors  its AdamW's state (nn::Optimizer::state(): exp_avg.<name>,
//                          exp_avg_sq.<name>, steps)
//   state.json             "transfer": what was measured before the first step (the loss at the
//                          swap, each layer's error) and the first step's loss; "settings":
//                          what the transfer's result depends on, checked on resume
// The folder is removed when the transfer ends (transfer.json then holds its report).
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "train/config.h"
#include "train/formats/safetensors.h"

namespace dark::train {

struct TransferState {
  std::int64_t step = 0;  // transfer steps taken
  formats::TensorMap params, optimizer;
  nlohmann::json record = nlohmann::json::object();  // the measurements before the first step, the first loss
};

// Whether run folder `run_dir` holds a transfer that stopped before its end.
bool transfer_in_progress(const std::filesystem::path& run_dir);

// What a transfer's result depends on besides its step count: the model, attention, data and
// batch settings, the seed, the source, the transfer's rate and what trains, the rank count.
nlohmann::json transfer_settings(const RunConfig& config, int ranks);

void save_transfer_state(const std::filesystem::path& run_dir, const TransferState& state, const nlohmann::json& settings);

// The saved state of `run_dir`'s transfer; nullopt when there is none. Throws when it was
// saved with other settings (naming the sections that differ).
std::optional<TransferState> load_transfer_state(const std::filesystem::path& run_dir, const nlohmann::json& settings);

void remove_transfer_state(const std::filesystem::path& run_dir);

}  // namespace dark::train
