// The `darkformer` subcommands. Each takes the arguments after its name, prints its usage
// on --help, and returns the process exit code (errors are thrown as dark::Error and
// reported by main).
#pragma once
#include <string>
#include <vector>

namespace dark::cli {

using CommandArgs = std::vector<std::string>;

int prepare_data_command(const CommandArgs& args);
int train_command(const CommandArgs& args);
int eval_command(const CommandArgs& args);
int generate_command(const CommandArgs& args);
int export_hf_command(const CommandArgs& args);
int probe_command(const CommandArgs& args);
int sweep_command(const CommandArgs& args);   // these two: train/cli/sweep_commands.cpp
int report_command(const CommandArgs& args);
int demo_mlp_command(const CommandArgs& args);  // the autograd demo (train/cli/mlp_demo.h)
int passkey_command(const CommandArgs& args);   // these two: train/cli/task_commands.cpp
int copy_command(const CommandArgs& args);
// config-keys (the config table) is answered in train/cli/main.cpp.

}  // namespace dark::cli
