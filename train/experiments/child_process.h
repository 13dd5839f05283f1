// Child programs of the experiments, all started one way: a sweep's training points and
// data preparation, and the report's gnuplot. Each child reads /dev/null, writes stdout and
// stderr to a log file, runs in a process group of its own and gets SIGTERM when its parent
// dies (see spawn).
#pragma once
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace dark::experiments {

// `program` as execve needs it: a name without a slash ("mpirun") is looked up on PATH; ""
// when it is not there.
std::string find_program(const std::string& program);

// Starts `argv` with stdout and stderr appended to `log`, environment `env` ("NAME=value"
// entries), in `working_dir` (empty: this process's); returns its pid. Throws when the
// program cannot be found or started ("cannot start PROGRAM: REASON"). The child ends with
// its parent however the parent ends: it gets SIGTERM when the parent dies
// (PR_SET_PDEATHSIG; a training point then saves its step and exits, a launcher passes it to
// its ranks). It runs in a process group of its own, so a terminal's Ctrl-C reaches it once,
// forwarded by the sweep, not also directly.
pid_t spawn(const std::vector<std::string>& argv, const std::filesystem::path& log, const std::vector<std::string>& env,
            const std::filesystem::path& working_dir = {});

// This process's environment, as spawn takes it.
std::vector<std::string> current_environment();

// Waits for `pid` (retrying on EINTR); its exit code (see exit_code_of).
int wait_for_exit(pid_t pid);

// The exit code of a waitpid status: 128 + signal for a child killed by a signal, as shells
// report it; -1 otherwise.
int exit_code_of(int wait_status);

}  // namespace dark::experiments
