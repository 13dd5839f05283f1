// Tokenizer and data location carried by checkpoints (see run_files.h).
#include "train/portable_checkpoint.h"

#include "data/tokenizer_file.h"

namespace dark::train {
namespace fs = std::filesystem;
using nlohmann::json;

void record_run_files(formats::CheckpointData& checkpoint, const data::Tokenizer& tokenizer, const fs::path& data_dir,
                      bool bos) {
  json record = {{"kind", tokenizer.kind()}, {"hash", tokenizer.hash()}, {"bos", bos}};
  if (auto file = data::tokenizer_file(tokenizer)) {
    record["file"] = file->name;
    checkpoint.files[file->name] = std::move(file->bytes);
  }
  checkpoint.state["tokenizer"] = std::move(record);
  checkpoint.state["data_dir"] = fs::absolute(data_dir).lexically_normal().string();
}

bool checkpoint_bos(const formats::CheckpointData& checkpoint) {
  const json& state = checkpoint.state;
  if (!state.contains("tokenizer") || !state["tokenizer"].is_object()) return false;
  const json& record = state["tokenizer"];
  if (!record.contains("bos")) return false;
  DARK_CHECK(record["bos"].is_boolean(), "state.json: tokenizer \"bos\" is ", record["bos"].dump(), ", expected true or false");
  return record["bos"].get<bool>();
}

std::string checkpoint_tokenizer_hash(const formats::CheckpointData& checkpoint) {
  const json& state = checkpoint.state;
  if (!state.contains("tokenizer") || !state["tokenizer"].is_object()) return "";
  return state["tokenizer"].value("hash", "");
}

std::shared_ptr<const data::Tokenizer> checkpoint_tokenizer(const formats::CheckpointData& checkpoint, const RunConfig& config,
                                                            const std::string& label) {
  const json& state = checkpoint.state;
  DARK_CHECK(state.value("task", "") != "mqar", label, " was trained on the synthetic MQAR task (data.task mqar): it has "
             "no tokenizer, and commands that read or write text do not apply to it; its recall accuracy is in the run "
             "folder's mqar.json and metrics.jsonl");
  if (!state.contains("tokenizer")) {  // an older checkpoint: its tokenizer lives with its data
    const fs::path dir = config.data.dir;
    DARK_CHECK(fs::exists(dir / "meta.json"), label, " does not carry its tokenizer (written by an older darkformer), "
               "and its data folder ", dir.string(), " (relative to the working directory) is not a prepared data "
               "folder: run from the directory it was trained in");
    return data::open_prepared(dir.string()).tokenizer;
  }
  const json& record = state["tokenizer"];
  DARK_CHECK(record.is_object() && record.contains("kind") && record["kind"].is_string() && record.contains("hash") &&
                 record["hash"].is_string(),
             label, ": state.json: \"tokenizer\" needs \"kind\" and \"hash\" strings");
  std::string bytes;
  if (record.contains("file")) {
    DARK_CHECK(record["file"].is_string(), label, ": state.json: tokenizer \"file\" is not a string");
    const std::string name = record["file"].get<std::string>();
    const auto it = checkpoint.files.find(name);
    DARK_CHECK(it != checkpoint.files.end(), label, ": the tokenizer file ", name, " is missing");
    bytes = it->second;
  }
  std::shared_ptr<const data::Tokenizer> tokenizer =
      data::tokenizer_from_file(record["kind"].get<std::string>(), std::move(bytes), label + " tokenizer");
  const std::string expected = record["hash"].get<std::string>();
  DARK_CHECK(tokenizer->hash() == expected, label, ": the tokenizer rebuilt from its file has hash ",
             tokenizer->hash(), ", state.json records ", expected);
  return tokenizer;
}

data::PreparedData checkpoint_data(const formats::CheckpointData& checkpoint, const RunConfig& config,
                                   const data::Tokenizer& tokenizer, bool bos, const std::string& data_flag,
                                   const std::string& label) {
  std::string dir = data_flag, why = "given with --data";
  if (dir.empty() && checkpoint.state.contains("data_dir") && checkpoint.state["data_dir"].is_string())
    dir = checkpoint.state["data_dir"].get<std::string>(), why = "where it was prepared for training";
  if (dir.empty()) dir = config.data.dir, why = "data.dir of its config, relative to the working directory";
  DARK_CHECK(fs::exists(fs::path(dir) / "meta.json"), "the validation data of ", label, " are not at ", dir, " (", why,
             "): prepare them with `darkformer prepare-data --config CONFIG` on the run's config (its data section), "
             "point to a prepared copy with --data DIR, or evaluate on a text file with --text FILE");
  data::PreparedData prepared = data::open_prepared(dir);
  DARK_CHECK(prepared.tokenizer->hash() == tokenizer.hash(), "--data ", dir, ": prepared with tokenizer ",
             prepared.tokenizer->hash(), ", but ", label, " was trained with ", tokenizer.hash(),
             ": the token ids would not mean the same");
  DARK_CHECK((prepared.window_bos_id >= 0) == bos, "the data at ", dir, " (", why, ") start windows ",
             prepared.window_bos_id >= 0 ? "with" : "without", " bos, but ", bos ? "bos" : "no bos",
             " is asked for (", label, checkpoint_bos(checkpoint) == bos ? " trained that way" : ", --bos",
             "): prepare data with data.bos \"", bos ? "always" : "never", "\", or use --text FILE");
  return prepared;
}

}  // namespace dark::train
