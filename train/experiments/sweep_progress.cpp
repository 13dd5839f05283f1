// The sweep's progress lines (see sweep_progress.h).
#include "train/experiments/sweep_progress.h"

#include <algorithm>
#include <fstream>

#include "core/error.h"
#include "train/progress.h"

namespace dark::experiments {
namespace fs = std::filesystem;

std::string progress_of_log_line(const std::string& line) {
  std::string text = line;
  // spdlog's pattern: "[2026-12-06 22:22:10.900] [info] text"
  for (int field = 0; field < 2 && text.starts_with("["); ++field) {
    const std::size_t close = text.find("] ");
    if (close == std::string::npos) break;
    text = text.substr(close + 2);
  }
  const bool progress = text.find("| ETA ") != std::string::npos || text.find("| done in ") != std::string::npos;
  return progress ? text : std::string();
}

SweepProgress::SweepProgress(std::size_t total, std::size_t done, int jobs, std::chrono::milliseconds interval)
    : total_(total), done_(done), jobs_(std::max(1, jobs)), interval_(interval) {}

void SweepProgress::started(pid_t pid, const std::string& name, const fs::path& log) {
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(log, ec);  // lines of an earlier attempt are not news
  running_[pid] = {name, log, ec ? 0 : size, "", Clock::now()};
}

void SweepProgress::ended(pid_t pid) {
  const auto it = running_.find(pid);
  if (it == running_.end()) return;
  finished_seconds_ += std::chrono::duration<double>(Clock::now() - it->second.start).count();
  ++finished_;
  ++done_;
  running_.erase(it);
}

std::string SweepProgress::sweep_eta() const {
  std::string text = str("sweep: ", done_, "/", total_, " done");
  if (finished_ == 0) return text;  // no point's time to go by yet
  const double per_point = finished_seconds_ / static_cast<double>(finished_);
  const std::size_t queued = total_ - done_ - running_.size();
  double left = per_point * static_cast<double>(queued);
  for (const auto& [pid, p] : running_)
    left += std::max(0.0, per_point - std::chrono::duration<double>(Clock::now() - p.start).count());
  return text + ", ETA " + train::duration_text(left / jobs_);
}

std::vector<std::string> SweepProgress::poll() {
  std::vector<std::string> lines;
  const Clock::time_point now = Clock::now();
  if (now - last_poll_ < interval_) return lines;
  last_poll_ = now;
  for (auto& [pid, p] : running_) {
    std::ifstream in(p.log, std::ios::binary);
    if (!in) continue;
    in.seekg(static_cast<std::streamoff>(p.offset));
    std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    p.offset += chunk.size();
    p.partial += chunk;
    std::string latest;
    std::size_t begin = 0;
    for (std::size_t end; (end = p.partial.find('\n', begin)) != std::string::npos; begin = end + 1)
      if (std::string progress = progress_of_log_line(p.partial.substr(begin, end - begin)); !progress.empty())
        latest = std::move(progress);
    p.partial.erase(0, begin);
    if (!latest.empty()) lines.push_back(str("[", p.name, "] ", latest, " | ", sweep_eta()));
  }
  return lines;
}

}  // namespace dark::experiments
