// For the tests that run the real `darkformer` binary as child processes and signal it:
// start one (stdout and stderr into a log file, one OpenMP thread so that runs compare bit for
// bit across processes), wait for it with a deadline, watch its run folder's metrics.jsonl
// grow, and find the children of a process in /proc.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

extern char** environ;

namespace dark::testing {

inline pid_t start_child(const std::vector<std::string>& argv, const std::filesystem::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_text = {"OMP_NUM_THREADS=1"};
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "OMP_NUM_THREADS=", 16) != 0) env_text.emplace_back(*e);
  std::vector<char*> env;
  for (std::string& e : env_text) env.push_back(e.data());
  env.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), env.data());  // mpirun on PATH too
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw Error(str("cannot start ", argv[0], ": ", std::strerror(rc)));
  return pid;
}

// The exit code of child `pid` (128 + signal when a signal ended it), or nothing when it has
// not ended within `limit` (it is then killed).
inline std::optional<int> wait_child(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return std::nullopt;
}

// Runs a command to its end (at most 3 minutes); its exit code, -1 when it did not end.
inline int run_child(const std::vector<std::string>& argv, const std::filesystem::path& log) {
  return wait_child(start_child(argv, log), std::chrono::seconds(180)).value_or(-1);
}

// The steps of the training-step lines (those with a grad_norm) of a run's metrics.jsonl, in
// file order; a line still being written is left out (metrics::read_metrics would refuse it:
// the run is still writing).
inline std::vector<std::int64_t> logged_steps(const std::filesystem::path& run) {
  std::vector<std::int64_t> steps;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("grad_norm")) steps.push_back(j["step"]);
  }
  return steps;
}

// Waits (up to a minute) until `run` has logged `count` training steps; false if it did not.
inline bool wait_for_steps(const std::filesystem::path& run, std::size_t count) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (logged_steps(run).size() < count) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

inline std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The pids whose parent is `parent`.
inline std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string status = read_all(entry.path() / "status");
    const std::size_t at = status.find("PPid:");
    if (at != std::string::npos && std::stol(status.substr(at + 5)) == parent) out.push_back(std::stoi(name));
  }
  return out;
}

// A process's command line, word by word (what ps shows).
inline std::vector<std::string> command_line(pid_t pid) {
  const std::string text = read_all(std::filesystem::path("/proc") / std::to_string(pid) / "cmdline");
  std::vector<std::string> words;
  for (std::size_t pos = 0, end; (end = text.find('\0', pos)) != std::string::npos; pos = end + 1)
    words.push_back(text.substr(pos, end - pos));
  return words;
}

}  // namespace dark::testing
