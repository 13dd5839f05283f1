// A trained model ready for inference, and the flags of the commands that run one (eval,
// generate, probe, export-hf). Two kinds of path load:
//   our checkpoint or run folder  its resolved config, weights and tokenizer, all from the
//                                 checkpoint (train/portable_checkpoint.h), so that it works
//                                 from any directory;
//   a .gguf file or a Hugging Face model folder (a "source", as llama.cpp users run one):
//                                 the model a finetuning config with it as finetune.init_from
//                                 builds at step 0 (softmax attention, the source's
//                                 architecture, tokenizer and context, and the bos rule its
//                                 tokenizer's metadata gives, as data.bos "auto" does).
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
                                  "a checkpoint directory, a run folder (its latest checkpoint), a .gguf model file or "
                                  "a Hugging Face model folder; required"};
// --set on a command that runs a trained model: only where it runs may change.
inline const FlagSpec kDeviceSet{"--set", "training.device=DEVICE", "",
                                 "run on cpu, cuda, cuda:N or auto (the checkpoint's other keys stay as trained)", true};
inline const FlagSpec kData{"--data", "DIR", "",
                            "prepared data folder to evaluate on (default: the one the run trained on; for a .gguf "
                            "or Hugging Face model, the debdocs data its finetuning config prepares, prepared if missing)"};
inline const FlagSpec kText{"--text", "FILE", "", "evaluate on this text file instead of prepared data"};
inline const FlagSpec kBos{"--bos", "RULE", "run",
                           "bos at the start of every window / prompt: run (as the checkpoint's run did, or as the "
                           "model's tokenizer says), always, never"};
inline const FlagSpec kSeqLen{"--seq-len", "N", "the run's data.seq_len",
                              "tokens per window; a .gguf or Hugging Face model: 1024, at most its context"};

// The window length a source (a .gguf file or Hugging Face folder) is evaluated at by
// default, capped at its context.
inline constexpr std::int64_t kSourceSeqLen = 1024;

struct LoadedRun {
  train::RunConfig config;  // for a source: the finetuning config's, data.seq_len the default window
  std::unique_ptr<nn::CausalLM> model;
  std::shared_ptr<const data::Tokenizer> tokenizer;
  formats::CheckpointData checkpoint;  // its state.json and files (the tensors are in the model); empty for a source
  std::int64_t step = 0;
  std::filesystem::path checkpoint_dir;  // empty for a source
  std::string label;  // "checkpoint <dir>" or "GGUF <file>", for errors
  bool source = false;  // a .gguf file or Hugging Face folder, not one of our checkpoints
  bool bos = false;     // whether its run's windows started with bos (a source: its tokenizer's rule)
};

// Whether `path` names a source (a .gguf file or a Hugging Face model folder) rather than one
// of our checkpoints or run folders.
bool is_source(const std::string& path);

// The model of `path` (a checkpoint, run folder, .gguf file or Hugging Face folder) in eval
// mode on the device of training.device; `overrides` may set training.device only.
LoadedRun load_run(const std::string& path, const std::vector<std::string>& overrides = {});

// --bos: whether windows and prompts start with bos (data/prepare.h BosRule); "run" is what
// the checkpoint's run did (for a source, what its tokenizer's metadata says).
bool bos_flag(const LoadedRun& run, const Args& a);

// --seq-len and --batch-size (where the command has them): the windows eval and probe cut,
// set in run.config (data.seq_len, training.batch_size). A length past the model's context
// (nn::CausalLM::decode_context) is allowed with a warning that its positions are
// extrapolated.
void apply_window_flags(LoadedRun& run, const Args& a);

// The data eval and probe read: --text FILE, else prepared data by the rule of
// portable_checkpoint.h (a source: --data DIR, else its finetuning config's data.dir, prepared
// there first if missing). `text` keeps the scratch shard of --text alive.
data::PreparedData run_data(const LoadedRun& run, const Args& a, data::TextData& text);

}  // namespace dark::cli
