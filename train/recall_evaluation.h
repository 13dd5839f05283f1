// The recall tasks of a run (evaluation.passkey and evaluation.copy in its config), run at the end
// of training after the final evaluation, on rank 0: passkey retrieval (train/passkey_eval.h)
// and the copy task (train/copy_eval.h), each with trials 0 = off. Each writes its JSON to the
// run folder (passkey.json, copy.json, as `darkformer passkey` / `copy` do) and returns what
// the run's metrics.jsonl line carries ({"passkey": {...}, "copy": {...}}), which the event
// file turns into scalars (passkey/accuracy, passkey/by_length/512, copy/word_accuracy, ...).
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "nn/model.h"
#include "train/config.h"

namespace dark::train {

// Before a run trains: that the tasks it will run at its end can run with its tokenizer (each
// passkey length holds the prompt without filler), so that a mistake fails at the start rather
// than after the training. Errors name the config key.
void check_recall_evaluation(const RunConfig& config, const data::Tokenizer& tokenizer, bool bos);

// Runs the configured tasks on `model` (bos: the run's rule), writes their JSON into `dir` and
// returns the metrics fields; an empty object when both are off.
nlohmann::json run_recall_evaluation(nn::CausalLM& model, const RunConfig& config, const data::Tokenizer& tokenizer,
                                     bool bos, const std::filesystem::path& dir, std::int64_t step);

}  // namespace dark::train
