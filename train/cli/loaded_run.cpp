// Loading a trained model for the inference commands (see loaded_run.h).
#include "train/cli/loaded_run.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

#include "nn/init.h"
#include "train/device_setting.h"
#include "train/swap/finetune.h"
#include "train/formats/hf_folder.h"
#include "train/model_builder.h"
#include "train/portable_checkpoint.h"
#include "train/training_run.h"

namespace dark::cli {
namespace fs = std::filesystem;

namespace {

void check_overrides(const std::vector<std::string>& overrides, const std::string& whose) {
  for (const std::string& o : overrides)
    DARK_CHECK(o.rfind("training.device=", 0) == 0, "--set ", o, ": only training.device may be set here (the model "
               "is the ", whose, "'s)");
}

LoadedRun load_checkpoint_run(const std::string& path, const std::vector<std::string>& overrides) {
  const fs::path dir = formats::find_checkpoint(path);
  LoadedRun run;
  run.checkpoint = formats::load_checkpoint(dir, {.optimizer = false});  // the model only runs
  formats::CheckpointData& ck = run.checkpoint;
  run.step = ck.step;
  run.checkpoint_dir = dir;
  run.label = "checkpoint " + dir.string();
  nlohmann::json config = ck.state.at("config");
  config["training"]["device"] = "cpu";  // where it trained does not matter here
  check_overrides(overrides, "checkpoint");
  for (const std::string& o : overrides) train::apply_override(config, o);
  run.config = train::parse_saved_config(config);  // a checkpoint from before a key reads as it ran
  run.tokenizer = train::checkpoint_tokenizer(ck, run.config, run.label);
  run.bos = train::checkpoint_bos(ck);
  {
    const nn::SkipInitialisation loaded_next;  // every parameter comes from the checkpoint
    run.model = train::build_model(run.config);
  }
  train::load_trained_state(*run.model, ck, run.config, run.label);
  ck.model.clear(), ck.attention.clear();  // now in the model
  return run;
}

// The config a source runs under: a finetuning config with finetune.init_from = `path`
// (softmax, training.steps 0, the default data section: corpus debdocs with the source's
// tokenizer, so data.dir is the folder that config prepares), the source's architecture
// `shape` adopted and model.max_seq_len its context; data.seq_len is the default window.
train::RunConfig source_config(const std::string& path, const nn::ModelConfig& shape, const std::string& label,
                               const std::vector<std::string>& overrides) {
  check_overrides(overrides, "source");
  nlohmann::json doc = {{"finetune", {{"init_from", path}}},
                        {"attention", {{"kind", "softmax"}}},
                        {"training", {{"steps", 0}, {"batch_size", 1}, {"device", "cpu"}}}};
  for (const std::string& o : overrides) train::apply_override(doc, o);
  train::RunConfig config = train::parse_config(doc);
  train::adopt_architecture(config, shape, label);
  if (shape.max_seq_len > 0) {
    config.model.max_seq_len = shape.max_seq_len;  // its own, even below the default data.seq_len
  } else {
    spdlog::warn("{} does not say its context length; taking {} tokens", label, config.model.max_seq_len);
  }
  config.data.seq_len = static_cast<int>(std::min<std::int64_t>(kSourceSeqLen, config.model.max_seq_len));
  train::validate_config(config);
  return config;
}

LoadedRun load_source_run(const std::string& path, const std::vector<std::string>& overrides) {
  train::InitSource source = train::load_init_source(path);
  LoadedRun run;
  run.source = true;
  run.label = source.description;
  run.config = source_config(path, source.model, run.label, overrides);
  run.tokenizer = data::load_tokenizer(run.config.data.tokenizer, run.config.data.tokenizer_model);
  run.config.data.vocab_size = run.tokenizer->vocab_size();  // the tokenizer's, as a run's saved config says
  run.bos = data::bos_at_window_start(run.config.data);       // data.bos "auto": the tokenizer's metadata
  {
    const nn::SkipInitialisation loaded_next;  // every parameter comes from the source (softmax adds none)
    run.model = train::build_model(run.config);
  }
  train::load_source_weights(*run.model, source);
  return run;
}

}  // namespace

bool is_source(const std::string& path) { return path.ends_with(".gguf") || formats::is_hf_model_folder(path); }

LoadedRun load_run(const std::string& path, const std::vector<std::string>& overrides) {
  LoadedRun run = is_source(path) ? load_source_run(path, overrides) : load_checkpoint_run(path, overrides);
  run.model->to(train::resolve_device(run.config.training.device));
  run.model->train(false);
  return run;
}

bool bos_flag(const LoadedRun& run, const Args& a) {
  const std::string rule = a.get("--bos");
  DARK_CHECK(rule == "run" || rule == "always" || rule == "never", "--bos: expected run, always or never, got '", rule,
             "'");
  const bool bos = rule == "run" ? run.bos : rule == "always";
  DARK_CHECK(!bos || run.tokenizer->bos_id() >= 0, "--bos ", rule, ": tokenizer ", run.tokenizer->hash(),
             " has no bos token");
  return bos;
}

void apply_window_flags(LoadedRun& run, const Args& a) {
  constexpr long long kMax = std::numeric_limits<int>::max();
  if (a.has("--batch-size")) run.config.training.batch_size = static_cast<int>(a.integer("--batch-size", 1, kMax));
  if (!a.has("--seq-len")) return;
  run.config.data.seq_len = static_cast<int>(a.integer("--seq-len", 1, kMax));
  const std::int64_t context = run.model->decode_context();  // 0: no limit
  if (context > 0 && run.config.data.seq_len > context)
    spdlog::warn("--seq-len {} exceeds the context of {} ({} tokens, model.max_seq_len): positions past it are "
                 "extrapolated",
                 run.config.data.seq_len, run.label, context);
}

data::PreparedData run_data(const LoadedRun& run, const Args& a, data::TextData& text) {
  DARK_CHECK(!(a.has("--text") && a.has("--data")), "--text and --data exclude each other");
  const bool bos = bos_flag(run, a);
  if (a.has("--text")) {
    text = data::text_as_data(a.get("--text"), run.tokenizer, bos);
    const std::int64_t needed = run.config.data.seq_len + 1;
    DARK_CHECK(text.data.val_tokens >= needed, "--text ", a.get("--text"), ": ", text.data.val_tokens,
               " tokens, fewer than one window of ", run.config.data.seq_len, " + 1 = ", needed,
               " (--seq-len sets the window)");
    return text.data;
  }
  if (!run.source)
    return train::checkpoint_data(run.checkpoint, run.config, *run.tokenizer, bos, a.get("--data"), run.label);
  // A source: --data DIR, else the data its finetuning config prepares (once; reused after).
  std::string dir = a.get("--data");
  if (dir.empty()) {
    DARK_CHECK(bos == run.bos, "--bos ", a.get("--bos"), ": the data prepared for ", run.label, " follow its "
               "tokenizer's rule (", run.bos ? "bos" : "no bos", " at window starts); give --data DIR prepared with "
               "data.bos \"", bos ? "always" : "never", "\", or --text FILE");
    if (!fs::exists(fs::path(run.config.data.dir) / "meta.json"))
      spdlog::info("{}: no prepared data at {}: preparing corpus '{}' with its tokenizer there (once; a finetuning "
                   "config with this model as finetune.init_from uses the same folder)",
                   run.label, run.config.data.dir, run.config.data.corpus);
    return data::prepare(run.config.data);
  }
  DARK_CHECK(fs::exists(fs::path(dir) / "meta.json"), "--data ", dir, ": no prepared data there (meta.json)");
  data::PreparedData prepared = data::open_prepared(dir);
  DARK_CHECK(prepared.tokenizer->hash() == run.tokenizer->hash(), "--data ", dir, ": prepared with tokenizer ",
             prepared.tokenizer->hash(), ", but ", run.label, " uses ", run.tokenizer->hash(),
             ": the token ids would not mean the same");
  DARK_CHECK((prepared.window_bos_id >= 0) == bos, "--data ", dir, ": its windows start ",
             prepared.window_bos_id >= 0 ? "with" : "without", " bos, but ", bos ? "bos" : "no bos", " is asked for");
  return prepared;
}

}  // namespace dark::cli
