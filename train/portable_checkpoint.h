// What a checkpoint carries so that it can be used with nothing but its folder, from any
// working directory or another machine (eval, generate, probe, export-hf):
//   the resolved config   state.json "config" (written by the trainer)
//   the tokenizer         a checkpoint file (data/tokenizer_file.h: tokenizer.model or
//                         tokenizer.bpe.json; none for the byte tokenizer), recorded as
//                         state.json "tokenizer": {"kind", "hash", "file", "bos"}; the
//                         rebuilt tokenizer must have the recorded hash; "bos": whether
//                         the run's windows started with bos (data/prepare.h BosRule;
//                         absent in older checkpoints, whose runs never had bos)
//   the data location     state.json "data_dir": the prepared data's absolute path at
//                         training time
// Where a command needs prepared data (eval and probe without --text), the rule is: the
// folder given with --data, else the recorded data_dir, else (checkpoints written before it
// was recorded) the config's data.dir. A missing folder is an error saying how to prepare it,
// point to it, or use --text FILE instead.
#pragma once
#include <filesystem>
#include <memory>
#include <string>

#include "data/prepare.h"
#include "data/tokenizer.h"
#include "train/formats/checkpoint.h"
#include "train/config.h"

namespace dark::train {

// Adds the tokenizer file and the state.json records above to a checkpoint being saved
// (`bos`: the windows start with bos).
void record_run_files(formats::CheckpointData& checkpoint, const data::Tokenizer& tokenizer,
                      const std::filesystem::path& data_dir, bool bos);

// Whether the checkpoint's run started every window with bos (eval --text, generate and probe
// do the same).
bool checkpoint_bos(const formats::CheckpointData& checkpoint);

// The tokenizer of a loaded checkpoint (`label` names it in errors). A checkpoint written
// before tokenizers were stored falls back to the prepared data of `config`.
std::shared_ptr<const data::Tokenizer> checkpoint_tokenizer(const formats::CheckpointData& checkpoint, const RunConfig& config,
                                                            const std::string& label);

// The tokenizer hash a checkpoint records; "" for one written before it was recorded.
std::string checkpoint_tokenizer_hash(const formats::CheckpointData& checkpoint);

// The prepared data of a checkpoint's run found by the rule above (`data_flag` is --data,
// "" when not given), checked to use `tokenizer` and to start windows with bos exactly when
// `bos` says so.
data::PreparedData checkpoint_data(const formats::CheckpointData& checkpoint, const RunConfig& config,
                                   const data::Tokenizer& tokenizer, bool bos, const std::string& data_flag,
                                   const std::string& label);

}  // namespace dark::train
