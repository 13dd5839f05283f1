// The recall tasks as commands: `darkformer passkey` (train/passkey_eval.h) and `darkformer
// copy` (train/copy_eval.h) on a trained model, each printing its tables and writing its JSON.
#include <cstdio>

#include "core/file_io.h"
#include "data/common_words.h"
#include "train/cli/args.h"
#include "train/cli/commands.h"
#include "train/cli/loaded_run.h"
#include "train/copy_eval.h"
#include "train/passkey_eval.h"

namespace dark::cli {
namespace fs = std::filesystem;

// Helpers, in a namespace of their own (the unity build compiles this file with others).
namespace task_commands_impl {

std::vector<std::int64_t> integer_list(const Args& a, const std::string& flag, long long min, long long max) {
  std::vector<std::int64_t> out;
  for (const long long v : a.integers(flag, min, max)) out.push_back(v);
  return out;
}

// The report's JSON with where it came from, at --json or <checkpoint>/NAME.
void write_task_json(const LoadedRun& run, const Args& a, const std::string& name, nlohmann::json report) {
  report["checkpoint"] = run.checkpoint_dir.string();
  report["step"] = run.step;
  const fs::path path = a.has("--json") ? fs::path(a.get("--json")) : run.checkpoint_dir / name;
  write_file_atomic(path, report.dump(1) + "\n");
  std::printf("\nwrote %s\n", path.c_str());
}

}  // namespace task_commands_impl

int passkey_command(const CommandArgs& args) {
  const std::vector<FlagSpec> specs = {
      kCheckpoint,
      {"--lengths", "LIST", "512,1024,2048,4096", "prompt lengths in tokens of the model's tokenizer, bos included"},
      {"--depths", "N", "5",
       "needle depths: a grid of N points from 0 (after the task line) to 1 (before the question)"},
      {"--trials", "N", "2", "prompts per (length, depth), each with its own pass key"},
      {"--seed", "S", "0", "seed of the pass keys: the same seed gives the same prompts on every machine"},
      {"--json", "PATH", "", "write the full results here; default <checkpoint>/passkey.json"},
      kBos,
      kDeviceSet,
      kHelpFlag};
  if (print_help_if_asked(
          args,
          "usage: darkformer passkey --checkpoint PATH [--lengths 512,1024,2048,4096] [--depths 5] "
          "[--trials N] [--seed S] [--json OUT]\n"
          "Passkey retrieval in Landmark Attention's format: a pass key (1..50000) hidden at a depth of\n"
          "repeated filler text, then \"What is the pass key? The pass key is\". Correct when the first\n"
          "number of the greedy continuation is the key. Prints accuracy by length x depth, by length and\n"
          "by depth with 95% Wilson intervals; see docs/long-context.md.",
          specs))
    return 0;
  Args a(args, specs);
  train::PasskeyOptions o;
  o.lengths = task_commands_impl::integer_list(a, "--lengths", 1, (1 << 24) - 1);
  o.depths = static_cast<int>(a.integer("--depths", 1, 1001));
  o.trials = static_cast<int>(a.integer("--trials", 1, (1 << 20) - 1));
  o.seed = static_cast<std::uint64_t>(a.integer("--seed", 0));
  LoadedRun run = load_run(a.require("--checkpoint"), a.all("--set"));
  o.bos = bos_flag(run, a);
  const train::PasskeyReport report = train::run_passkey(*run.model, *run.tokenizer, o);
  std::printf("\npasskey of %s (step %lld), seed %llu, %s\n\n%s", run.checkpoint_dir.c_str(),
              static_cast<long long>(run.step), static_cast<unsigned long long>(o.seed), o.bos ? "bos" : "no bos",
              report.table().c_str());
  task_commands_impl::write_task_json(run, a, "passkey.json", report.to_json());
  return 0;
}

int copy_command(const CommandArgs& args) {
  const std::vector<FlagSpec> specs = {
      kCheckpoint,
      {"--words", "LIST", "32,128,512,2048,4096",
       "list lengths in words (at most 4096); the distance back is about the words + 6 tokens (SmolLM2, Gemma 3)"},
      {"--trials", "N", "1", "random lists per length"},
      {"--seed", "S", "0", "seed of the lists: the same seed gives the same prompts on every machine"},
      {"--json", "PATH", "", "write the full results here; default <checkpoint>/copy.json"},
      kBos,
      kDeviceSet,
      kHelpFlag};
  if (print_help_if_asked(
          args,
          "usage: darkformer copy --checkpoint PATH [--words 32,128,512,2048,4096] [--trials N] "
          "[--seed S] [--json OUT]\n"
          "The copy task: \"Here is a list of words: w1 ... wn\" then \"The same list again: w1 ... wn\".\n"
          "On the repeat, by teacher forcing: next-token loss and accuracy of its tokens and the share of\n"
          "words whose every token is the argmax, by list length and by distance back to the word's\n"
          "first occurrence; see docs/long-context.md.",
          specs))
    return 0;
  Args a(args, specs);
  train::CopyOptions o;
  o.words = task_commands_impl::integer_list(a, "--words", 2, data::kCommonWordCount);
  o.trials = static_cast<int>(a.integer("--trials", 1, (1 << 20) - 1));
  o.seed = static_cast<std::uint64_t>(a.integer("--seed", 0));
  LoadedRun run = load_run(a.require("--checkpoint"), a.all("--set"));
  o.bos = bos_flag(run, a);
  const train::CopyReport report = train::run_copy(*run.model, *run.tokenizer, o);
  std::printf("\ncopy task of %s (step %lld), seed %llu, %s\n\n%s", run.checkpoint_dir.c_str(),
              static_cast<long long>(run.step), static_cast<unsigned long long>(o.seed), o.bos ? "bos" : "no bos",
              report.table().c_str());
  task_commands_impl::write_task_json(run, a, "copy.json", report.to_json());
  return 0;
}

}  // namespace dark::cli
