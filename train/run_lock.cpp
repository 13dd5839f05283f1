// The run folder's writer lock (see run_lock.h).
#include "train/run_lock.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"

namespace dark::train {
namespace fs = std::filesystem;

namespace {

// The whole lock file through its descriptor: "pid host\n", or "" (released, or its owner
// has not written it yet).
std::string read_owner(int fd) {
  std::string text;
  char buf[256];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    at += n;
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

std::string this_owner() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown");
  return str(::getpid(), " ", host);
}

// "process N on host H" from "N H".
std::string owner_text(const std::string& owner) {
  std::istringstream in(owner);
  std::string pid, host;
  in >> pid >> host;
  if (pid.empty()) return "another process (it has not written its pid yet)";
  return str("process ", pid, " on host ", host.empty() ? "?" : host);
}

}  // namespace

fs::path lock_file(const fs::path& folder) { return folder / ".lock"; }

RunLock::RunLock(const fs::path& folder, const std::string& what) {
  fs::create_directories(folder);
  const fs::path path = lock_file(folder);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  DARK_IO_CHECK(fd_ >= 0, "open", path);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const std::string owner = read_owner(fd_);
    ::close(fd_);
    fd_ = -1;
    DARK_CHECK(error != EWOULDBLOCK, what, " ", folder.string(), " is in use by ", owner_text(owner),
               ": one process at a time writes a run folder (wait for it to end, or use another folder)");
    errno = error;
    DARK_IO_CHECK(false, "flock", path);
  }
  // Held: whatever the file still says was written by a holder that died without releasing it.
  taken_over_from_ = read_owner(fd_);
  if (!taken_over_from_.empty())
    spdlog::warn("{} {}: taking over the lock left by {}, which has ended", what, folder.string(),
                 owner_text(taken_over_from_));
  const std::string owner = this_owner() + "\n";
  DARK_IO_CHECK(::ftruncate(fd_, 0) == 0, "ftruncate", path);
  DARK_IO_CHECK(::pwrite(fd_, owner.data(), owner.size(), 0) == static_cast<ssize_t>(owner.size()), "pwrite", path);
}

RunLock::RunLock(RunLock&& other) noexcept : fd_(other.fd_), taken_over_from_(std::move(other.taken_over_from_)) {
  other.fd_ = -1;
}

RunLock::~RunLock() {
  if (fd_ < 0) return;
  // Emptied while still held: the next holder sees a clean release, not a dead owner.
  (void)::ftruncate(fd_, 0);
  ::close(fd_);
}

}  // namespace dark::train
