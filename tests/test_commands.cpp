// The command-line layer: one argument parser for every subcommand (demo-mlp included), its
// range checks, and the shared progress text (durations, progress bars); eval, generate and
// probe on a GGUF file and a Hugging Face folder directly (the numbers of run folders made
// from them), their context and window flags and errors.
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/tokenizer.h"
#include "test_util.h"
#include "tiny_gguf_model.h"
#include "train/cli/args.h"
#include "train/cli/commands.h"
#include "train/cli/loaded_run.h"
#include "train/formats/checkpoint.h"
#include "train/progress.h"
#include "train/trainer.h"
#include "train_test_util.h"

namespace dark::train {
namespace {

using dark::testing::error_of;

TEST(Commands, DemoMlpHelpAndFlagsGoThroughTheSharedParser) {
  EXPECT_EQ(cli::demo_mlp_command({"--help"}), 0);
  EXPECT_EQ(cli::demo_mlp_command({"-h"}), 0);
  EXPECT_EQ(error_of([] { cli::demo_mlp_command({"--steps"}); }), "--steps needs a value (N)");
  EXPECT_EQ(error_of([] { cli::demo_mlp_command({"--stpes", "3"}); }), "unknown argument '--stpes'");
  EXPECT_EQ(error_of([] { cli::demo_mlp_command({"--steps", "0"}); }),
            "--steps: 0 is out of range: expected an integer in [1, 2147483647]");
  EXPECT_EQ(error_of([] { cli::demo_mlp_command({"--steps", "1e3"}); }), "--steps: '1e3' is not an integer");
  EXPECT_EQ(error_of([] { cli::demo_mlp_command({"--steps", "99999999999999999999"}); }),
            "--steps: 99999999999999999999 is out of range: expected an integer in [1, 2147483647]");
  EXPECT_EQ(error_of([] { cli::demo_mlp_command({"--lr", "nan"}); }), "--lr: 'nan' is not a finite number");
  EXPECT_EQ(error_of([] { cli::demo_mlp_command({"--lr", "-1"}); }), "--lr: expected a number > 0, got -1");
  EXPECT_EQ(error_of([] { cli::demo_mlp_command({"--seed", "-2"}); }),
            "--seed: -2 is out of range: expected an integer >= 0");
  EXPECT_EQ(cli::demo_mlp_command({"--steps", "5", "--batch-size=8", "--seed", "3"}), 0);
}

TEST(Commands, IntegerRangesAreCheckedNotCut) {
  const std::vector<cli::FlagSpec> specs = {{"--n", "N", "7", ""}};
  EXPECT_EQ(cli::Args({}, specs).integer("--n", 0, 10), 7);
  EXPECT_EQ(cli::Args({"--n", "-5"}, specs).integer("--n"), -5);
  EXPECT_EQ(error_of([&] { cli::Args({"--n", "11"}, specs).integer("--n", 0, 10); }),
            "--n: 11 is out of range: expected an integer in [0, 10]");
  EXPECT_EQ(error_of([&] { cli::Args({"--n", "-1"}, specs).integer("--n", 0); }),
            "--n: -1 is out of range: expected an integer >= 0");
  EXPECT_EQ(error_of([&] { cli::Args({"--n", "9223372036854775808"}, specs).integer("--n"); }),
            "--n: 9223372036854775808 is out of range: expected an integer <= 9223372036854775807");
  EXPECT_EQ(error_of([&] { cli::Args({"--n", "1e999"}, specs).number("--n"); }), "--n: '1e999' is not a finite number");
  EXPECT_DOUBLE_EQ(cli::Args({"--n", "2.5e-3"}, specs).number("--n"), 2.5e-3);
}

TEST(Progress, DurationsAndBars) {
  EXPECT_EQ(duration_text(0), "0s");
  EXPECT_EQ(duration_text(44.6), "45s");
  EXPECT_EQ(duration_text(187), "3m07s");
  EXPECT_EQ(duration_text(3599.4), "59m59s");
  EXPECT_EQ(duration_text(7530), "2h05m");
  EXPECT_EQ(duration_text(-3), "0s");
  EXPECT_EQ(progress_bar(0, 10, 4), "[....]");
  EXPECT_EQ(progress_bar(5, 10, 4), "[##..]");
  EXPECT_EQ(progress_bar(10, 10, 4), "[####]");
  EXPECT_EQ(progress_bar(20, 10, 4), "[####]");
  EXPECT_EQ(progress_bar(3, 0, 4), "[####]");
}

// Work that ends within the first 5 s says nothing; longer work logs once 5 s have passed,
// then every 15 s, and once at the end.
TEST(Progress, LogsOnlyWorkThatTakesAWhile) {
  double now = 0;
  const ProgressLog::Clock clock = [&] { return now; };
  ProgressLog quick("evaluation", "batch", "batches", 4, 5, 15, clock);
  for (int b = 1; b <= 4; ++b) {
    now += 1;
    EXPECT_EQ(quick.update(b), "") << b;
  }
  now = 0;
  ProgressLog slow("evaluation", "batch", "batches", 20, 5, 15, clock);
  std::vector<std::string> lines;
  for (int b = 1; b <= 20; ++b) {
    now += 2;  // 2 s a batch: lines after batches 3 (6 s), 11 (22 s) and 19 (38 s), and at the end
    if (std::string line = slow.update(b); !line.empty()) lines.push_back(line);
  }
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "evaluation: batch 3/20 [###.................] | 2.00 s/batch | ETA 34s");
  EXPECT_EQ(lines[1].substr(0, 20), "evaluation: batch 11");
  EXPECT_EQ(lines[3], "evaluation: batch 20/20 [####################] | 2.00 s/batch | done in 40s");
  now = 0;
  ProgressLog tokens("generate", "token", "tokens", 100, 0, 15, clock);
  now = 0.5;
  EXPECT_EQ(tokens.update(10), "generate: token 10/100 [##..................] | 20.0 tokens/s | ETA 5s");
}

}  // namespace

// A namespace of its own: darkformer_tests is a unity build (tests/CMakeLists.txt).
namespace commands_test {
namespace {

namespace fs = std::filesystem;
using dark::testing::expect_error;
using dark::testing::TempDir;
using nlohmann::json;

struct Printed {
  int code = -1;
  std::string out, err;
};
// Runs a command in-process: its exit code and what it printed on stdout and stderr.
Printed printed(int (*command)(const cli::CommandArgs&), const cli::CommandArgs& args) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  Printed p;
  try {
    p.code = command(args);
  } catch (...) {
    std::fflush(stdout);
    ::testing::internal::GetCapturedStdout();
    ::testing::internal::GetCapturedStderr();
    throw;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  p.out = ::testing::internal::GetCapturedStdout();
  p.err = ::testing::internal::GetCapturedStderr();
  return p;
}

// eval's result line (its log lines, with their time stamps, also go to stdout).
std::string eval_line(const Printed& p) {
  EXPECT_EQ(p.code, 0);
  const std::size_t at = p.out.find("step ");
  return at == std::string::npos ? "no result line in: " + p.out : p.out.substr(at, p.out.find('\n', at) - at);
}

cli::CommandArgs with(cli::CommandArgs args, const std::string& checkpoint) {
  args.insert(args.begin(), {"--checkpoint", checkpoint});
  return args;
}

class ChangedWorkingDirectory {
 public:
  explicit ChangedWorkingDirectory(const fs::path& dir) : previous_(fs::current_path()) { fs::current_path(dir); }
  ~ChangedWorkingDirectory() { fs::current_path(previous_); }

 private:
  fs::path previous_;
};

// The tests' Hugging Face folder and the same weights and tokenizer as a GGUF file
// (tests/tiny_gguf_model.h), each run directly and through a run folder made from it by a
// finetuning config of no steps: eval, generate and probe give the same numbers and text.
TEST(SourceCommands, GgufFileAndHfFolderGiveTheNumbersOfTheirRunFolders) {
  TempDir tmp;
  const std::string gguf = tmp / "tiny.gguf", folder = dark::testing::kHfTinyFolder.string();
  dark::testing::write_hf_tiny_as_gguf(gguf);
  const formats::HfTokenizerFile folder_tokenizer = formats::hf_tokenizer_file(folder);
  const auto a = data::load_tokenizer("gguf", gguf), b = data::load_tokenizer(folder_tokenizer.kind, folder_tokenizer.path);
  const std::string text = dark::testing::generated_text(40, 2) + " 2026 and 31415 digits";
  EXPECT_EQ(a->encode(text), b->encode(text));
  dark::testing::write_text(tmp / "text.txt", text);

  // Run folders of the same weights: no steps (the config's warm-up of 5 left in), softmax.
  std::map<std::string, std::string> paths = {{"gguf", gguf}, {"folder", folder}};
  for (const auto& [name, source] : std::map<std::string, std::string>(paths)) {
    json config = train::finetune_config(tmp, "from-" + name, 0, source, {{"kind", "softmax"}}, {"all"});
    config["data"].erase("tokenizer");
    config["data"]["dir"] = tmp / ("data-" + name);
    config["data"]["seq_len"] = 16;
    config["data"]["val_windows"] = 64;  // a source's default, for --data below
    train::train(train::parse_config(config), {});
    paths["run-" + name] = tmp / ("from-" + name);
  }
  const json saved = formats::load_checkpoint(formats::find_checkpoint(tmp / "from-gguf")).state.at("config");
  EXPECT_EQ(saved["model"]["max_seq_len"], 64);  // llama.context_length, not data.seq_len 16

  const cli::CommandArgs eval_args = {"--text", tmp / "text.txt", "--seq-len", "24", "--batch-size", "2"};
  const cli::CommandArgs generate_args = {"--prompt", "ka to 12 ri", "--max-tokens", "8", "--temperature", "0"};
  const std::string eval_gguf = eval_line(printed(cli::eval_command, with(eval_args, gguf)));
  const Printed generated_gguf = printed(cli::generate_command, with(generate_args, gguf));
  EXPECT_EQ(eval_gguf.rfind("step 0 | val loss ", 0), 0u) << eval_gguf;
  EXPECT_NE(eval_gguf.find("tokens of " + tmp / "text.txt"), std::string::npos) << eval_gguf;
  EXPECT_EQ(generated_gguf.out.rfind("ka to 12 ri", 0), 0u) << generated_gguf.out;
  EXPECT_GT(generated_gguf.out.size(), std::string("ka to 12 ri\n").size());
  EXPECT_NE(generated_gguf.err.find("context 64"), std::string::npos) << generated_gguf.err;
  EXPECT_NE(generated_gguf.err.find("; prefill "), std::string::npos) << generated_gguf.err;
  EXPECT_NE(generated_gguf.err.find(" prompt tokens/s), then "), std::string::npos) << generated_gguf.err;
  // --prompt-file: the same continuation, without the prompt echoed; one of the two flags.
  dark::testing::write_text(tmp / "prompt.txt", "ka to 12 ri");
  const Printed from_file = printed(cli::generate_command, with({"--prompt-file", tmp / "prompt.txt", "--max-tokens",
                                                                 "8", "--temperature", "0"}, gguf));
  EXPECT_EQ("ka to 12 ri" + from_file.out, generated_gguf.out);
  expect_error([&] { printed(cli::generate_command, with({"--max-tokens", "2"}, gguf)); },
               {"--prompt TEXT or --prompt-file FILE (one of them)"});
  expect_error([&] { printed(cli::generate_command, with({"--prompt", "ka", "--prompt-file", tmp / "prompt.txt"}, gguf)); },
               {"--prompt TEXT or --prompt-file FILE (one of them)"});
  expect_error([&] { printed(cli::generate_command, with({"--prompt-file", tmp / "missing.txt"}, gguf)); },
               {"missing.txt"});
  for (const auto& [name, path] : paths) {
    EXPECT_EQ(eval_line(printed(cli::eval_command, with(eval_args, path))), eval_gguf) << name;
    EXPECT_EQ(printed(cli::generate_command, with(generate_args, path)).out, generated_gguf.out) << name;
  }
  // A source's defaults: windows of min(1024, its context) = 64 tokens, batches of 1.
  EXPECT_EQ(eval_line(printed(cli::eval_command, {"--checkpoint", gguf, "--text", tmp / "text.txt"})),
            eval_line(printed(cli::eval_command, with({"--text", tmp / "text.txt", "--seq-len", "64", "--batch-size", "1"}, gguf))));
  // --data: the run's prepared folder gives the numbers the run gives on it.
  const cli::CommandArgs data_args = {"--data", tmp / "data-gguf", "--seq-len", "16", "--batch-size", "4"};
  EXPECT_EQ(eval_line(printed(cli::eval_command, with(data_args, gguf))),
            eval_line(printed(cli::eval_command, with({"--seq-len", "16", "--batch-size", "4"}, tmp / "from-gguf"))));

  // Without --text or --data: the debdocs folder a finetuning config of the source prepares.
  const cli::LoadedRun run = cli::load_run(gguf);
  EXPECT_TRUE(run.source);
  EXPECT_FALSE(run.bos);  // the GGUF's tokenizer says no add_bos_token
  EXPECT_EQ(run.step, 0);
  EXPECT_EQ(run.model->decode_context(), 64);
  EXPECT_EQ(run.config.data.seq_len, 64);
  EXPECT_EQ(run.config.data.dir, train::parse_config(json{{"finetune", {{"init_from", gguf}}}}).data.dir);
  EXPECT_EQ(run.config.data.dir, "cache/data/debdocs-gguf-tiny");
  EXPECT_EQ(cli::load_run(folder).config.data.dir, "cache/data/debdocs-hf-hf_llama_tiny");

  // probe reads the source too; its report goes to the working directory (not beside the model).
  {
    const ChangedWorkingDirectory cwd(tmp.path());
    const Printed probe = printed(cli::probe_command, {"--checkpoint", gguf, "--text", tmp / "text.txt", "--seq-len", "16",
                                                       "--features", "8", "--redraws", "1", "--batches", "1",
                                                       "--calibration-batches", "1"});
    EXPECT_EQ(probe.code, 0);
    EXPECT_NE(probe.out.find("performer"), std::string::npos) << probe.out;
    EXPECT_TRUE(fs::exists(tmp / "probe-tiny.json"));
  }
}

// The context and window flags on a source of context 64 (the GGUF above): a prompt longer
// than the context is an error naming both numbers and the flag, never a cut; --context above
// the model's is allowed with a warning; bad values are errors naming the flag.
TEST(SourceCommands, ContextAndWindowFlagsAreCheckedNotCut) {
  TempDir tmp;
  const std::string gguf = tmp / "tiny.gguf";
  dark::testing::write_hf_tiny_as_gguf(gguf);
  std::string long_prompt;
  for (int i = 0; i < 100; ++i) long_prompt += "1";  // one token per digit
  const cli::CommandArgs generate_args = {"--prompt", long_prompt, "--max-tokens", "3", "--temperature", "0"};
  expect_error([&] { printed(cli::generate_command, with(generate_args, gguf)); },
               {"the prompt has 100 tokens, more than the context of 64 tokens (the model's, model.max_seq_len)",
                "nothing is cut", "--context N with N >= 100", "positions past the model's 64 are extrapolated"});
  cli::CommandArgs wider = generate_args;
  wider.insert(wider.end(), {"--context", "120"});
  const Printed long_read = printed(cli::generate_command, with(wider, gguf));
  EXPECT_EQ(long_read.code, 0);
  EXPECT_NE(long_read.err.find("warning: --context 120 exceeds the context of GGUF " + gguf + " (64 tokens"),
            std::string::npos) << long_read.err;
  EXPECT_NE(long_read.err.find("100 prompt token(s), context 120"), std::string::npos) << long_read.err;
  cli::CommandArgs narrower = {"--prompt", "ka to ri", "--context", "2"};
  expect_error([&] { printed(cli::generate_command, with(narrower, gguf)); },
               {"the prompt has", "more than the context of 2 tokens (--context)"});
  expect_error([&] { printed(cli::generate_command, with({"--prompt", "ka", "--context", "1"}, gguf)); },
               {"--context: 1 is out of range"});

  dark::testing::write_text(tmp / "text.txt", dark::testing::generated_text(60, 1));
  const Printed past = printed(cli::eval_command, with({"--text", tmp / "text.txt", "--seq-len", "80"}, gguf));
  // A log line: on stdout, or on stderr once generate has sent the log there in this process.
  EXPECT_NE((past.out + past.err).find("--seq-len 80 exceeds the context of GGUF " + gguf + " (64 tokens, "
                                       "model.max_seq_len): positions past it are extrapolated"),
            std::string::npos) << past.out << past.err;
  EXPECT_NE(past.err.find("window(s) of 80 tokens, in batches of 1"), std::string::npos) << past.err;
  expect_error([&] { printed(cli::eval_command, with({"--text", tmp / "text.txt", "--seq-len", "0"}, gguf)); },
               {"--seq-len: 0 is out of range"});
  expect_error([&] { printed(cli::eval_command, with({"--text", tmp / "text.txt", "--batch-size", "0"}, gguf)); },
               {"--batch-size: 0 is out of range"});
  expect_error([&] { printed(cli::eval_command, with({"--text", tmp / "text.txt", "--seq-len", "5000"}, gguf)); },
               {"fewer than one window of 5000 + 1", "--seq-len"});
  expect_error([&] { printed(cli::eval_command, with({"--data", tmp / "nowhere"}, gguf)); },
               {"--data", "nowhere", "no prepared data"});
  expect_error([&] { printed(cli::eval_command, with({"--bos", "always"}, gguf)); },
               {"--bos always", "tokenizer's rule", "--text FILE"});
  expect_error([&] { printed(cli::eval_command, with({"--set", "attention.kind=performer"}, gguf)); },
               {"--set attention.kind=performer", "only training.device"});
}

}  // namespace
}  // namespace commands_test
}  // namespace dark::train
