// One writer per run folder: an exclusive flock(2) on <folder>/.lock, held by the process that
// writes the folder (`darkformer train`, rank 0 under mpirun; a sweep on its sweep folder)
// from before its first read of the folder's state to its exit. A second writer fails at once
// with "run folder X is in use by process N on host H" and touches nothing else. The kernel
// drops the lock when its holder dies, however it dies (kill -9 included); the file then still
// names the dead owner, and the next writer takes it over with a log line. A clean release
// empties the file. Readers (eval, generate, probe, report) take no lock.
// flock works across hosts on NFS (Linux maps it onto NFS byte-range locks) and on local
// file systems; a file system without locks is an error naming the folder.
#pragma once
#include <filesystem>
#include <string>

namespace dark::train {

class RunLock {
 public:
  // Creates `folder` when missing and takes its lock, or throws dark::Error
  // "<what> X is in use by process N on host H". `what` names the folder in messages
  // ("run folder", "sweep folder").
  explicit RunLock(const std::filesystem::path& folder, const std::string& what = "run folder");
  ~RunLock();
  RunLock(RunLock&& other) noexcept;  // TrainingRun moves
  RunLock& operator=(RunLock&&) = delete;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  // "pid host" of a previous holder that ended without releasing the lock (taken over), or "".
  const std::string& taken_over_from() const { return taken_over_from_; }

 private:
  int fd_ = -1;
  std::string taken_over_from_;
};

// The lock file of a folder: <folder>/.lock.
std::filesystem::path lock_file(const std::filesystem::path& folder);

}  // namespace dark::train
