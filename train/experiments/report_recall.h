// The recall tasks in sweeps: the fields a summary row gets from a point's passkey.json and
// copy.json (train/recall_evaluation.h), and the report's sections on them:
//   Passkey retrieval  accuracy by method x prompt length (and "all"): the cell's trials pooled,
//                      correct/trials with its 95% Wilson interval, and with seeds the mean ± sd
//                      of the points' accuracies; then the paired comparisons by seed of every
//                      pair of methods at every length (95% t interval of the mean difference).
//   Copy task          words copied by method x list length (pooled, Wilson interval, mean ± sd
//                      over seeds), the distance back each length gives, the repeat's token loss;
//                      paired comparisons by seed of the words copied.
//   Associative recall  (MQAR, data.task mqar, from mqar.json: train/mqar_eval.h) accuracy by
//                      method x number of pairs and by method x query-key distance bucket
//                      (pooled, Wilson interval, mean ± sd over seeds); paired comparisons by
//                      seed of the accuracy at each number of pairs.
// Sections appear only when some point has the file.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "train/experiments/report_data.h"

namespace dark::experiments {

// {"passkey": {"accuracy", "by_length": {"512": ...}} or null, "copy": {"word_accuracy",
// "token_accuracy", "loss", "by_words": {...}} or null, "mqar": {"accuracy", "by_pairs": {"4": ...}}
// or null}, from the point's run folder.
nlohmann::json recall_summary(const std::filesystem::path& point_dir);

// The report's "Passkey retrieval" and "Copy task" sections ("" when no point has either file).
std::string recall_sections(const ReportData& d);

}  // namespace dark::experiments
