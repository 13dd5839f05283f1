// The recall tasks at the end of a run (see recall_evaluation.h).
#include "train/recall_evaluation.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/error.h"
#include "core/file_io.h"
#include "data/passkey_prompt.h"
#include "train/copy_eval.h"
#include "train/passkey_eval.h"

namespace dark::train {

void check_recall_evaluation(const RunConfig& config, const data::Tokenizer& tokenizer, bool bos) {
  const PasskeyEvaluationConfig& p = config.evaluation.passkey;
  if (p.trials == 0) return;
  const std::int64_t shortest = *std::min_element(p.lengths.begin(), p.lengths.end());
  try {
    (void)data::passkey_prompt(tokenizer, bos, shortest, 0.5, data::kPasskeyMax);
  } catch (const Error& e) {
    throw Error(str("config: evaluation.passkey.lengths: ", e.what()));
  }
}

nlohmann::json run_recall_evaluation(nn::CausalLM& model, const RunConfig& config, const data::Tokenizer& tokenizer,
                                     bool bos, const std::filesystem::path& dir, std::int64_t step) {
  nlohmann::json fields = nlohmann::json::object();
  const PasskeyEvaluationConfig& p = config.evaluation.passkey;
  if (p.trials > 0) {
    PasskeyOptions o;
    o.lengths = p.lengths;
    o.depths = p.depths;
    o.trials = p.trials;
    o.seed = p.seed;
    o.bos = bos;
    const PasskeyReport report = run_passkey(model, tokenizer, o);
    nlohmann::json out = report.to_json();
    out["step"] = step;
    write_file_atomic(dir / "passkey.json", out.dump(1) + "\n");
    spdlog::info("passkey retrieval at step {} (evaluation.passkey; {}):\n{}", step, (dir / "passkey.json").string(),
                 report.table());
    fields["passkey"] = report.metrics();
  }
  const CopyEvaluationConfig& c = config.evaluation.copy;
  if (c.trials > 0) {
    CopyOptions o;
    o.words = c.words;
    o.trials = c.trials;
    o.seed = c.seed;
    o.bos = bos;
    const CopyReport report = run_copy(model, tokenizer, o);
    nlohmann::json out = report.to_json();
    out["step"] = step;
    write_file_atomic(dir / "copy.json", out.dump(1) + "\n");
    spdlog::info("copy task at step {} (evaluation.copy; {}):\n{}", step, (dir / "copy.json").string(), report.table());
    fields["copy"] = report.metrics();
  }
  return fields;
}

}  // namespace dark::train
