// Self-contained run folders (train/portable_checkpoint.h): checkpoints carry their tokenizer and
// config, so eval, generate, probe and export-hf work on a copy of the run folder, from
// another working directory, with the data cache gone; prepared data are found by the
// documented rule (--data, else the recorded absolute path), and a missing folder is a clear
// error; runs that differ only in their seed share the prepared data. Also the pieces:
// tokenizer files that rebuild the same tokenizer, checkpoint files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "core/file_io.h"
#include "data/bpe_tokenizer.h"
#include "data/prepare.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/tokenizer_file.h"
#include "test_util.h"
#include "train/formats/checkpoint.h"
#include "train/cli/commands.h"
#include "train/model_builder.h"
#include "train/trainer.h"
#include "train_test_util.h"

namespace dark::train {
namespace {

namespace fs = std::filesystem;
using dark::testing::expect_error;
using dark::testing::generated_text;
using dark::testing::TempDir;
using dark::testing::write_text;
using nlohmann::json;

const std::vector<std::string> kSamples = {"kala mora tesu", "  two  spaces\n\tand a tab", "digits 12345",
                                           "ünïcödé → ok", ""};

void expect_same_tokenizer(const data::Tokenizer& a, const data::Tokenizer& b) {
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(a.vocab_size(), b.vocab_size());
  EXPECT_EQ(a.eos_id(), b.eos_id());
  EXPECT_EQ(a.bos_id(), b.bos_id());
  for (const std::string& s : kSamples) EXPECT_EQ(a.encode(s), b.encode(s)) << s;
}

TEST(TokenizerFile, SentencePieceRebuildsTheSameTokenizer) {
  data::LineSampler lines(1 << 20, 0);
  lines.add_text(generated_text(2000, 7));
  data::SentencePieceOptions o;
  o.vocab_size = 320;
  o.character_coverage = 1.0;
  const auto sp = data::SentencePieceTokenizer::train(lines.lines(), o);
  const auto file = data::tokenizer_file(*sp);
  ASSERT_TRUE(file.has_value());
  EXPECT_EQ(file->name, "tokenizer.model");
  EXPECT_EQ(file->bytes, sp->model_bytes());
  expect_same_tokenizer(*sp, *data::tokenizer_from_file("sentencepiece", file->bytes, "test"));
}

TEST(TokenizerFile, BpeRebuildsTheSameTokenizerAndRejectsDamage) {
  data::BpeVocab v;
  v.tokens = {"<|endoftext|>", "<|im_start|>"};
  v.token_types = {3, 3};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(data::BpeTokenizer::byte_encode(std::string(1, static_cast<char>(b))));
    v.token_types.push_back(1);
  }
  v.tokens.insert(v.tokens.end(), {"ka", "la", "kala"});
  v.token_types.insert(v.token_types.end(), {1, 1, 1});
  v.merges = {"k a", "l a", "ka la"};
  v.eos_id = 0;
  v.bos_id = 1;
  v.pre = "smollm";
  const data::BpeTokenizer bpe(v);
  const auto file = data::tokenizer_file(bpe);
  ASSERT_TRUE(file.has_value());
  EXPECT_EQ(file->name, "tokenizer.bpe.json");
  const auto rebuilt = data::tokenizer_from_file("gguf", file->bytes, "test");
  expect_same_tokenizer(bpe, *rebuilt);
  EXPECT_EQ(rebuilt->encode("kala<|im_start|>"), (std::vector<std::int32_t>{260, 1}));

  json damaged = json::parse(file->bytes);
  damaged["merges"].push_back("x y");  // "xy" is not in the vocabulary
  expect_error([&] { data::tokenizer_from_file("gguf", damaged.dump(), "t.json"); }, {"t.json", "x y"});
  damaged = json::parse(file->bytes);
  damaged.erase("eos_id");
  expect_error([&] { data::tokenizer_from_file("gguf", damaged.dump(), "t.json"); }, {"t.json", "eos_id", "missing"});
  expect_error([&] { data::tokenizer_from_file("gguf", "{", "t.json"); }, {"t.json", "not valid JSON"});
  EXPECT_FALSE(data::tokenizer_file(data::ByteTokenizer()).has_value());
}

TEST(CheckpointFiles, ExtraFilesRoundTripAndAreChecksummed) {
  TempDir tmp;
  formats::CheckpointData ck;
  ck.step = 3;
  ck.model["w"] = Tensor::zeros({2});
  ck.files["tokenizer.model"] = std::string("model\0bytes", 11);
  const fs::path dir = formats::save_checkpoint(tmp.path(), ck, 0);
  EXPECT_EQ(formats::load_checkpoint(dir).files, ck.files);

  write_text((dir / "tokenizer.model").string(), std::string("modelXbytes", 11));
  expect_error([&] { formats::load_checkpoint(dir); }, {"tokenizer.model", "checksum mismatch"});
  ck.files = {{"../escape", "x"}};
  expect_error([&] { formats::save_checkpoint(tmp.path(), ck, 0); }, {"../escape", "not a plain file name"});
  ck.files = {{"state.json", "x"}};
  expect_error([&] { formats::save_checkpoint(tmp.path(), ck, 0); }, {"state.json", "checkpoint's own"});
}

// Runs a command in-process, returning its exit code and what it printed.
std::pair<int, std::string> run_command(int (*command)(const cli::CommandArgs&), const cli::CommandArgs& args) {
  ::testing::internal::CaptureStdout();
  const int code = command(args);
  std::fflush(stdout);
  return {code, ::testing::internal::GetCapturedStdout()};
}

// Changes the working directory for a scope.
class WorkingDirectory {
 public:
  explicit WorkingDirectory(const fs::path& dir) : previous_(fs::current_path()) { fs::current_path(dir); }
  ~WorkingDirectory() { fs::current_path(previous_); }

 private:
  fs::path previous_;
};

// data.bos travels with the run: the checkpoint records it, eval / generate follow it, --bos
// overrides it, and prepared data of the other rule are refused, never mixed.
TEST(RunFolder, TheBosRuleTravelsWithTheCheckpoint) {
  TempDir tmp;
  json config = tiny_config(tmp, "run", 10);
  config["data"]["bos"] = "always";
  train(parse_config(config), {});
  const fs::path ck = formats::find_checkpoint((tmp / "run"));
  EXPECT_EQ(formats::load_checkpoint(ck).state["tokenizer"]["bos"], true);
  EXPECT_EQ(data::open_prepared(tmp / "data").window_bos_id, data::ByteTokenizer::kBos);

  const std::string run = tmp / "run", text = tmp / "corpus/doc0.txt";
  const std::string as_run = run_command(cli::eval_command, {"--checkpoint", run, "--text", text}).second;
  EXPECT_EQ(run_command(cli::eval_command, {"--checkpoint", run, "--text", text, "--bos", "always"}).second, as_run);
  EXPECT_NE(run_command(cli::eval_command, {"--checkpoint", run, "--text", text, "--bos", "never"}).second, as_run);
  expect_error([&] { cli::eval_command({"--checkpoint", run, "--bos", "sometimes"}); }, {"--bos", "sometimes"});

  // The run's own data (with bos) under --bos never, and data prepared without bos under the
  // run's rule: both refused, naming the way out.
  expect_error([&] { cli::eval_command({"--checkpoint", run, "--bos", "never"}); },
               {"start windows with bos", "no bos", "data.bos", "--text"});
  data::DataConfig plain = parse_config(config).data;
  plain.bos = data::BosRule::never;
  plain.dir = tmp / "data-nobos";
  data::prepare(plain);
  expect_error([&] { cli::eval_command({"--checkpoint", run, "--data", tmp / "data-nobos"}); },
               {"start windows without bos", "bos is asked for"});
  EXPECT_EQ(run_command(cli::eval_command, {"--checkpoint", run, "--data", tmp / "data-nobos", "--bos", "never"}).first, 0);

  // generate: the prompt starts with bos (it decodes to nothing, so the text starts with the
  // prompt either way).
  const auto [code, sample] =
      run_command(cli::generate_command, {"--checkpoint", run, "--prompt", "ka", "--max-tokens", "4", "--temperature", "0"});
  EXPECT_EQ(code, 0);
  EXPECT_EQ(sample.rfind("ka", 0), 0u);
}

TEST(RunFolder, ACopyWorksFromAnotherDirectoryWithoutTheDataCache) {
  TempDir tmp;
  json config = tiny_config(tmp, "run", 6);
  config["data"]["tokenizer"] = "sentencepiece";
  config["data"]["vocab_size"] = 320;
  config["data"]["sources"] = {tmp / "corpus"};
  for (int i = 3; i < 8; ++i) write_text(tmp / ("corpus/more" + std::to_string(i) + ".txt"), generated_text(600, i));
  train(parse_config(config), {});
  const std::string text_file = tmp / "corpus/doc0.txt";
  const cli::CommandArgs generate_args = {"--prompt", "kala", "--max-tokens", "6", "--temperature", "0"};
  auto with = [](cli::CommandArgs args, const std::string& run) {
    args.insert(args.begin(), {"--checkpoint", run});
    return args;
  };
  const auto [eval_code, eval_before] = run_command(cli::eval_command, {"--checkpoint", tmp / "run"});
  ASSERT_EQ(eval_code, 0);
  const std::string sample_before = run_command(cli::generate_command, with(generate_args, tmp / "run")).second;
  const std::string text_eval_before = run_command(cli::eval_command, {"--checkpoint", tmp / "run", "--text", text_file}).second;

  // Another place, another working directory, no data cache and no corpus.
  fs::create_directories(tmp / "elsewhere");
  fs::copy(tmp / "run", tmp / "elsewhere/run", fs::copy_options::recursive);
  fs::copy(text_file, tmp / "elsewhere/text.txt");
  fs::rename(tmp / "data", tmp / "data-moved");
  fs::remove_all(tmp / "corpus");
  fs::create_directories(tmp / "cwd");
  const WorkingDirectory cwd(tmp / "cwd");
  const std::string run = tmp / "elsewhere/run";

  expect_error([&] { cli::eval_command({"--checkpoint", run}); }, {"validation data", tmp / "data", "prepare-data", "--data", "--text"});
  const auto [text_code, text_eval] = run_command(cli::eval_command, {"--checkpoint", run, "--text", tmp / "elsewhere/text.txt"});
  EXPECT_EQ(text_code, 0);
  EXPECT_EQ(text_eval.substr(0, text_eval.find(" of ")), text_eval_before.substr(0, text_eval_before.find(" of ")));
  EXPECT_NE(text_eval.find("val loss"), std::string::npos) << text_eval;
  // --data points to the prepared data wherever they are now: the same numbers as before.
  EXPECT_EQ(run_command(cli::eval_command, {"--checkpoint", run, "--data", tmp / "data-moved"}).second, eval_before);
  EXPECT_EQ(run_command(cli::generate_command, with(generate_args, run)).second, sample_before);
  const auto [probe_code, probe_out] =
      run_command(cli::probe_command, {"--checkpoint", run, "--text", tmp / "elsewhere/text.txt", "--features", "8",
                                  "--redraws", "1", "--batches", "1", "--calibration-batches", "1"});
  EXPECT_EQ(probe_code, 0);
  EXPECT_NE(probe_out.find("performer"), std::string::npos) << probe_out;
  EXPECT_EQ(run_command(cli::export_hf_command, {"--checkpoint", run, "--out", tmp / "hf"}).first, 0);
  EXPECT_TRUE(fs::exists(tmp / "hf/model.safetensors"));
  EXPECT_TRUE(fs::exists(tmp / "hf/tokenizer.model"));  // from the checkpoint: the data are gone

  // Data of another tokenizer, a text too short for one window, and both sources at once.
  json byte_config = tiny_config(tmp, "unused", 6);
  byte_config["data"]["dir"] = tmp / "byte-data";
  data::prepare(parse_config(byte_config).data);
  expect_error([&] { cli::eval_command({"--checkpoint", run, "--data", tmp / "byte-data"}); },
               {"byte-data", "token ids would not mean the same"});
  write_text(tmp / "short.txt", "ka");
  expect_error([&] { cli::eval_command({"--checkpoint", run, "--text", tmp / "short.txt"}); }, {"short.txt", "fewer than one window"});
  expect_error([&] { cli::eval_command({"--checkpoint", run, "--text", text_file, "--data", tmp / "data-moved"}); },
               {"--text and --data"});
}

TEST(RunFolder, ATamperedTokenizerFileIsRejected) {
  TempDir tmp;
  json config = tiny_config(tmp, "run", 2);
  config["data"]["tokenizer"] = "sentencepiece";
  config["data"]["vocab_size"] = 300;
  config["schedule"]["warmup_steps"] = 1;
  train(parse_config(config), {});
  const fs::path ck = *formats::latest_checkpoint(tmp / "run");
  json state = json::parse(read_file(ck / "state.json"));
  EXPECT_EQ(state["tokenizer"]["kind"], "sentencepiece");
  EXPECT_EQ(state["tokenizer"]["file"], "tokenizer.model");
  EXPECT_EQ(state["data_dir"], fs::absolute(tmp / "data").lexically_normal().string());
  state["tokenizer"]["hash"] = "sentencepiece-0000000000000000";
  write_text(ck / "state.json", state.dump(2));
  expect_error([&] { cli::generate_command({"--checkpoint", tmp / "run", "--prompt", "ka"}); },
               {"rebuilt from its file has hash", "sentencepiece-0000000000000000"});
}

// A sweep's seeds replicate one experiment: runs that differ only in `seed` share the prepared
// folder and its tokenizer. (The seed once keyed the tokenizer's sampling: each seed rebuilt
// the folder over the others' while they trained.)
TEST(RunFolder, RunsThatDifferOnlyInTheirSeedShareThePreparedData) {
  TempDir tmp;
  json config = tiny_config(tmp, "run", 10);
  config["data"]["tokenizer"] = "sentencepiece";
  config["data"]["vocab_size"] = 300;
  RunConfig first = parse_config(config);
  const std::string hash = prepare_data_for(first).tokenizer->hash();
  const auto written = fs::last_write_time(tmp / "data/meta.json");
  for (const int seed : {4, 5}) {
    config["seed"] = seed;
    RunConfig other = parse_config(config);
    EXPECT_EQ(prepare_data_for(other).tokenizer->hash(), hash) << "seed " << seed;
    EXPECT_EQ(fs::last_write_time(tmp / "data/meta.json"), written) << "seed " << seed << " rebuilt the folder";
  }
}

}  // namespace
}  // namespace dark::train
