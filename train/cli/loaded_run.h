// A trained model ready for inference, and the flags of the commands that run one (eval,
// generate, probe, export-hf): its resolved config, weights and tokenizer, all from the
// checkpoint (train/portable_checkpoint.h), so that it works from any directory.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/text_data.h"
#include "nn/model.h"
#include "train/cli/args.h"
#include "train/config.h"
#include "train/formats/checkpoint.h"

namespace dark::cli {

inline const FlagSpec kCheckpoint{"--checkpoint", "PATH", "",
                                  "a checkpoint directory, or a run folder (its latest checkpoint); required"};
// --set on a command that runs a trained model: only where it runs may change.
inline const FlagSpec kDeviceSet{"--set", "training.device=DEVICE", "",
                                 "run on cpu, cuda, cuda:N or auto (the checkpoint's other keys stay as trained)", true};
inline const FlagSpec kData{"--data", "DIR", "", "prepared data folder to evaluate on (default: the one the run trained on)"};
inline const FlagSpec kText{"--text", "FILE", "", "evaluate on this text file instead of prepared data"};
inline const FlagSpec kBos{"--bos", "RULE", "run",
                           "bos at the start of every window / prompt: run (as the checkpoint's run did), always, never"};

struct LoadedRun {
  train::RunConfig config;
  std::unique_ptr<nn::CausalLM> model;
  std::shared_ptr<const data::Tokenizer> tokenizer;
  formats::CheckpointData checkpoint;  // its state.json and files (the tensors are in the model)
  std::int64_t step = 0;
  std::filesystem::path checkpoint_dir;
  std::string label;  // "checkpoint <dir>", for errors
};

// The model of `path` (a checkpoint or run folder) in eval mode on the device of
// training.device; `overrides` may set training.device only.
LoadedRun load_run(const std::string& path, const std::vector<std::string>& overrides = {});

// --bos: whether windows and prompts start with bos (data/prepare.h BosRule); "run" is what
// the checkpoint's run did.
bool bos_flag(const LoadedRun& run, const Args& a);

// The data eval and probe read: --text FILE, else prepared data by the rule of run_files.h.
// `text` keeps the scratch shard of --text alive.
data::PreparedData run_data(const LoadedRun& run, const Args& a, data::TextData& text);

}  // namespace dark::cli
