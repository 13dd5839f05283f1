// Checkpoints: a directory <run>/checkpoints/step_<NNNNNNNN>/ holding
//   model.safetensors      parameters by name (metadata {"format": "pt"}, as transformers expects)
//   optimizer.safetensors  optimizer state tensors by name ("exp_avg.<parameter name>", ...)
//   attention.safetensors  only when non-empty: attention state that is not trained (the
//                          variance-optimal proposal), "<layer prefix>.feature_map.<name>"
//   <other files>          CheckpointData::files, e.g. the tokenizer (train/portable_checkpoint.h)
//   state.json             {"format": "darkformer-checkpoint", "format_version": 1, "step": N,
//                           "files": {"<file>": {"bytes": B, "sha256": "<hex>"}, ...},
//                           ...the trainer's own keys: resolved config, RNG, data position}
// Invariants: a directory named step_<digits> is complete. It is written as
// step_<NNNNNNNN>.tmp-<pid> (every file fsynced, then the directory), renamed to its final
// name, and the parent fsynced; only then are older checkpoints pruned. Readers ignore every
// other name, so a crash at any point leaves the previous checkpoints usable. Loading checks
// the format version and every file's size and SHA-256 before parsing anything.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "train/formats/safetensors.h"

namespace dark::formats {

inline constexpr int kCheckpointFormatVersion = 1;

struct CheckpointData {
  std::int64_t step = 0;                            // optimizer steps taken
  TensorMap model;                                  // parameters by hierarchical name
  TensorMap optimizer;                              // optimizer state by name
  TensorMap attention;                              // untrained attention state (may be empty)
  // Other files stored beside the tensors, plain name -> bytes, sized and checksummed in
  // state.json like them (names: letters, digits, '.', '_', '-'; not the names above).
  std::map<std::string, std::string> files;
  nlohmann::json state = nlohmann::json::object();  // trainer state; may not use the keys
                                                    // format, format_version, step, files
};

// "step_00000100" (at least 8 digits).
std::string checkpoint_name(std::int64_t step);

// Writes data as checkpoint data.step of run_dir (replacing an existing checkpoint of the same
// step atomically), then deletes all but the newest `keep_last` complete checkpoints (0 = keep
// all; the one just written is always kept) and leftover temp directories of dead processes.
// Returns the checkpoint's directory.
std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, const CheckpointData& data,
                                      int keep_last);

// What a reader needs of a checkpoint: commands that only run the model (eval, generate,
// probe, export, a finetuning source) leave the optimizer state unread and unverified.
struct CheckpointParts {
  bool optimizer = true;
};

// Verifies and reads a checkpoint directory; tensors come back on the CPU. Errors start
// "checkpoint step_NNNNNNNN: ", e.g. "... model.safetensors checksum mismatch (file corrupted?)".
// Without parts.optimizer, CheckpointData::optimizer stays empty.
CheckpointData load_checkpoint(const std::filesystem::path& checkpoint_dir, CheckpointParts parts = {});

struct CheckpointEntry {
  std::int64_t step;
  std::filesystem::path path;
};
// The complete checkpoints of a run, by increasing step (empty when there are none).
std::vector<CheckpointEntry> list_checkpoints(const std::filesystem::path& run_dir);
// The newest complete checkpoint, if any; temp and half-deleted directories are ignored.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& run_dir);
// `path` itself when it is a checkpoint directory, else the latest checkpoint of the run
// folder `path`; throws naming `path` when it is neither.
std::filesystem::path find_checkpoint(const std::filesystem::path& path);

}  // namespace dark::formats
