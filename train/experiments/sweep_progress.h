// The sweep's console while its points train: each running point's latest progress line (a
// training step, a transfer step, an evaluation: the lines with an ETA that the trainer
// writes to the point's train.log), printed once per new line with the point's name and the
// sweep's own ETA, e.g.
//   [lfk_seed0] step 30/60 [##########..........] | loss 3.4012 | ... | ETA 1m05s | sweep: 4/21 done, ETA 58m
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace dark::experiments {

// The progress part of a train.log line: its text after spdlog's "[time] [level] " prefix
// when it reports progress (it has an ETA, or says an evaluation or transfer is done);
// "" otherwise.
std::string progress_of_log_line(const std::string& line);

class SweepProgress {
 public:
  using Clock = std::chrono::steady_clock;
  // total: the sweep's points; done: those finished before it started (skipped); jobs: points
  // at a time; interval: the least time between two polls that read the logs.
  SweepProgress(std::size_t total, std::size_t done, int jobs, std::chrono::milliseconds interval = std::chrono::seconds(2));

  void started(pid_t pid, const std::string& name, const std::filesystem::path& log);
  void ended(pid_t pid);
  // The lines to print: a running point's latest progress line, where it has a new one.
  std::vector<std::string> poll();

 private:
  struct Point {
    std::string name;
    std::filesystem::path log;
    std::uintmax_t offset = 0;  // bytes of the log read so far
    std::string partial;        // a line not yet ended
    Clock::time_point start;
  };
  std::string sweep_eta() const;

  std::size_t total_, done_;
  int jobs_;
  std::chrono::milliseconds interval_;
  Clock::time_point last_poll_{};
  std::map<pid_t, Point> running_;
  double finished_seconds_ = 0;  // the wall time of the points that ended here, summed
  std::size_t finished_ = 0;
};

}  // namespace dark::experiments
