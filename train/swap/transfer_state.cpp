// A transfer's saved state (see transfer_state.h).
#include "train/swap/transfer_state.h"

#include <string>

#include "core/error.h"
#include "train/formats/checkpoint.h"

namespace dark::train {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path state_folder(const fs::path& run_dir) { return run_dir / "transfer"; }

}  // namespace

bool transfer_in_progress(const fs::path& run_dir) { return formats::latest_checkpoint(state_folder(run_dir)).has_value(); }

json transfer_settings(const RunConfig& config, int ranks) {
  const json all = to_json(config);
  json finetune = all.at("finetune");
  finetune["transfer"].erase("steps");  // a longer or shorter transfer continues the same fit
  finetune["transfer"].erase("checkpoint_interval");
  finetune["transfer"].erase("eval_batches");
  return {{"model", all.at("model")},
          {"attention", all.at("attention")},
          {"data", all.at("data")},
          {"seed", all.at("seed")},
          {"finetune", finetune},
          {"batch_size", config.training.batch_size},
          {"grad_accum", config.training.grad_accum},
          {"ranks", ranks}};
}

void save_transfer_state(const fs::path& run_dir, const TransferState& state, const json& settings) {
  formats::CheckpointData data;
  data.step = state.step;
  data.model = state.params;
  data.optimizer = state.optimizer;
  data.state = {{"transfer", state.record}, {"settings", settings}};
  formats::save_checkpoint(state_folder(run_dir), data, /*keep_last=*/1);
}

std::optional<TransferState> load_transfer_state(const fs::path& run_dir, const json& settings) {
  const auto latest = formats::latest_checkpoint(state_folder(run_dir));
  if (!latest) return std::nullopt;
  formats::CheckpointData data = formats::load_checkpoint(*latest);
  const json& saved = data.state.at("settings");
  if (saved != settings) {
    std::string differ;
    for (const auto& [key, value] : settings.items())
      if (!saved.contains(key) || saved.at(key) != value) differ += (differ.empty() ? "" : ", ") + key;
    throw Error(str("attention transfer: the transfer saved in ", latest->string(), " was made with other settings (",
                    differ.empty() ? std::string("its own") : differ,
                    "): restore them to continue it, or remove ", state_folder(run_dir).string(), " to start over"));
  }
  TransferState state;
  state.step = data.step;
  state.params = std::move(data.model);
  state.optimizer = std::move(data.optimizer);
  state.record = data.state.at("transfer");
  return state;
}

void remove_transfer_state(const fs::path& run_dir) { fs::remove_all(state_folder(run_dir)); }

}  // namespace dark::train
