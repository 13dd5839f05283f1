// The darkformer command-line program: dispatches to the subcommands in train/cli/commands.h
// and turns errors into a message and a non-zero exit code.
#include <cstdio>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/error.h"
#include "train/cli/commands.h"
#include "train/config.h"
#include "train/dist/communicator.h"
#include "train/dist/leak_check_under_mpirun.h"  // once per program (see there)

namespace {

constexpr const char* kUsage = R"(usage: darkformer <command> [options]

commands:
  prepare-data  build the tokenizer and token shards of a config's corpus (once; reused after)
  train         train a model:  darkformer train --config FILE [--set KEY=VALUE ...] [--resume]
  eval          validation loss, perplexity and accuracy:  darkformer eval --checkpoint PATH
  generate      sample text:  darkformer generate --checkpoint PATH --prompt TEXT [--max-tokens N]
  export-hf     write a Hugging Face LlamaForCausalLM folder:  darkformer export-hf --checkpoint PATH --out DIR
  probe         random-feature approximation errors of a trained model:  darkformer probe --checkpoint PATH
  sweep         train a grid of config overrides:  darkformer sweep --config SWEEP.json [--jobs N] [--dry-run]
  report        tables and plots of a sweep:  darkformer report SWEEP_DIR
  passkey       passkey retrieval accuracy by length and depth:  darkformer passkey --checkpoint PATH
  copy          copying a random word list, by distance:  darkformer copy --checkpoint PATH
  config-keys   print every config key with its type, default, allowed values and meaning
  demo-mlp      train a small MLP on a synthetic regression task with the autograd tape

`darkformer COMMAND --help` lists each command's options and defaults.

options:
  --help        show this message
  --version     print the version and the backends this build has

exit codes: 0 done, 1 error, 2 unknown command, 75 train or sweep stopped by SIGTERM/SIGINT after
saving its state (continue with --resume; re-run the sweep), 128+N killed by signal N.
)";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "darkformer: %s\n\n%s", message.c_str(), kUsage);
  return 2;
}

// Runs one command; errors propagate to main.
int run_command(const std::vector<std::string>& args) {
  const std::string& command = args[0];
  if (command == "--help" || command == "-h" || command == "help") {
    std::printf("%s", kUsage);
    return 0;
  }
  if (command == "--version") {
    std::printf("darkformer %s (cpu: oneDNN%s)\n", DARK_VERSION,
#ifdef DARK_WITH_CUDA
                dark::cuda_available() ? ", cuda: available" : ", cuda: built, no device"
#else
                ", cuda: not built"
#endif
    );
    return 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "demo-mlp") return dark::cli::demo_mlp_command(rest);
  if (command == "prepare-data") return dark::cli::prepare_data_command(rest);
  if (command == "train") return dark::cli::train_command(rest);
  if (command == "eval") return dark::cli::eval_command(rest);
  if (command == "generate") return dark::cli::generate_command(rest);
  if (command == "export-hf") return dark::cli::export_hf_command(rest);
  if (command == "probe") return dark::cli::probe_command(rest);
  if (command == "sweep") return dark::cli::sweep_command(rest);
  if (command == "report") return dark::cli::report_command(rest);
  if (command == "passkey") return dark::cli::passkey_command(rest);
  if (command == "copy") return dark::cli::copy_command(rest);
  if (command == "config-keys") {
    std::printf("%s", dark::train::config_markdown_table().c_str());
    return 0;
  }
  return usage_error("unknown command '" + command + "'");
}

// "rank N: " under mpirun, "" otherwise: error messages say which rank failed.
std::string rank_prefix() {
  const int rank = dark::dist::launcher_rank();
  return rank < 0 ? "" : "rank " + std::to_string(rank) + ": ";
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usage_error("no command given");
  try {
    const int code = run_command(args);
    dark::dist::finalize();
    return code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "darkformer: %serror: %s\n", rank_prefix().c_str(), e.what());
    // Under mpirun the other ranks may be waiting in a collective for this one: end them all.
    if (dark::dist::launched_by_mpi()) dark::dist::abort_job(1);
    return 1;
  }
}
