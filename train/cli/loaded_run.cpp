// Loading a trained model for the inference commands (see loaded_run.h).
#include "train/cli/loaded_run.h"

#include "nn/init.h"
#include "train/device_setting.h"
#include "train/model_builder.h"
#include "train/portable_checkpoint.h"
#include "train/training_run.h"

namespace dark::cli {
namespace fs = std::filesystem;

LoadedRun load_run(const std::string& path, const std::vector<std::string>& overrides) {
  const fs::path dir = formats::find_checkpoint(path);
  LoadedRun run;
  run.checkpoint = formats::load_checkpoint(dir, {.optimizer = false});  // the model only runs
  formats::CheckpointData& ck = run.checkpoint;
  run.step = ck.step;
  run.checkpoint_dir = dir;
  run.label = "checkpoint " + dir.string();
  nlohmann::json config = ck.state.at("config");
  config["training"]["device"] = "cpu";  // where it trained does not matter here
  for (const std::string& o : overrides) {
    DARK_CHECK(o.rfind("training.device=", 0) == 0, "--set ", o, ": only training.device may be set here (the model "
               "is the checkpoint's)");
    train::apply_override(config, o);
  }
  run.config = train::parse_config(config);
  run.tokenizer = train::checkpoint_tokenizer(ck, run.config, run.label);
  {
    const nn::SkipInitialisation loaded_next;  // every parameter comes from the checkpoint
    run.model = train::build_model(run.config);
  }
  train::load_trained_state(*run.model, ck, run.config, run.label);
  ck.model.clear(), ck.attention.clear();  // now in the model
  run.model->to(train::resolve_device(run.config.training.device));
  run.model->train(false);
  return run;
}

bool bos_flag(const LoadedRun& run, const Args& a) {
  const std::string rule = a.get("--bos");
  DARK_CHECK(rule == "run" || rule == "always" || rule == "never", "--bos: expected run, always or never, got '", rule,
             "'");
  const bool bos = rule == "run" ? train::checkpoint_bos(run.checkpoint) : rule == "always";
  DARK_CHECK(!bos || run.tokenizer->bos_id() >= 0, "--bos ", rule, ": tokenizer ", run.tokenizer->hash(),
             " has no bos token");
  return bos;
}

data::PreparedData run_data(const LoadedRun& run, const Args& a, data::TextData& text) {
  DARK_CHECK(!(a.has("--text") && a.has("--data")), "--text and --data exclude each other");
  const bool bos = bos_flag(run, a);
  if (!a.has("--text"))
    return train::checkpoint_data(run.checkpoint, run.config, *run.tokenizer, bos, a.get("--data"), run.label);
  text = data::text_as_data(a.get("--text"), run.tokenizer, bos);
  const std::int64_t needed = run.config.data.seq_len + 1;
  DARK_CHECK(text.data.val_tokens >= needed, "--text ", a.get("--text"), ": ", text.data.val_tokens,
             " tokens, fewer than one window of data.seq_len + 1 = ", needed);
  return text.data;
}

}  // namespace dark::cli
