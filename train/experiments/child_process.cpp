// Starting and waiting for child programs (see child_process.h).
#include "train/experiments/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"

extern char** environ;

namespace dark::experiments {
namespace fs = std::filesystem;

std::string find_program(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

// fork + exec rather than posix_spawn: the child has to set up the process group, signal
// mask, parent-death signal and working folder itself; between fork and exec it only makes
// async-signal-safe calls.
pid_t spawn(const std::vector<std::string>& argv, const fs::path& log, const std::vector<std::string>& env,
            const fs::path& working_dir) {
  DARK_CHECK(!argv.empty(), "spawn: no program given");
  const std::string program = find_program(argv[0]);
  DARK_CHECK(!program.empty(), "cannot start ", argv[0], ": not found on PATH");
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  DARK_IO_CHECK(in >= 0, "open", "/dev/null");
  const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out < 0) ::close(in);
  DARK_IO_CHECK(out >= 0, "open", log);
  int report[2];  // the child writes errno here when chdir or exec fails; closed on exec otherwise
  DARK_CHECK(::pipe2(report, O_CLOEXEC) == 0, "cannot start ", argv[0], ": pipe2: ", std::strerror(errno));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    sigset_t none;  // a sweep blocks SIGTERM and SIGINT (StopSignals); exec would keep them blocked
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // The parent may have died before prctl: then no signal would ever come.
    if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || ::getppid() != parent) ::_exit(127);
    ::dup2(in, STDIN_FILENO);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(out, STDERR_FILENO);
    if (working_dir.empty() || ::chdir(working_dir.c_str()) == 0) ::execve(program.c_str(), args.data(), envp.data());
    const int error = errno;
    (void)!::write(report[1], &error, sizeof error);
    ::_exit(127);
  }
  const int fork_error = errno;
  ::close(in), ::close(out), ::close(report[1]);
  if (pid < 0) {
    ::close(report[0]);
    throw Error(str("cannot start ", argv[0], ": fork: ", std::strerror(fork_error)));
  }
  int exec_error = 0;
  ssize_t n;
  while ((n = ::read(report[0], &exec_error, sizeof exec_error)) < 0 && errno == EINTR) {
  }
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof exec_error)) {
    ::waitpid(pid, nullptr, 0);
    throw Error(str("cannot start ", program, working_dir.empty() ? "" : " in " + working_dir.string(), ": ",
                    std::strerror(exec_error)));
  }
  return pid;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

int wait_for_exit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    DARK_CHECK(errno == EINTR, "waitpid: ", std::strerror(errno));
  }
  return exit_code_of(status);
}

int exit_code_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

}  // namespace dark::experiments
