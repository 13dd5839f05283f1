// Helpers shared by the libFuzzer targets: a memory file (memfd) that the loaders that take
// a path (GGUF, token shards, configs) can open as /proc/self/fd/N, so each input is read
// through the loader's real code path (open, fstat, mmap) without touching the disk.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>

namespace dark::fuzz {

class MemFile {
 public:
  MemFile(const std::uint8_t* data, std::size_t size) {
    fd_ = ::memfd_create("dark-fuzz", MFD_CLOEXEC);
    if (fd_ < 0) die("memfd_create");
    for (std::size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) die("write");
      done += static_cast<std::size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  // A harness failure, not a finding in the code under test: stop loudly.
  [[noreturn]] static void die(const char* call) {
    std::perror(call);
    std::abort();
  }
  int fd_ = -1;
  std::string path_;
};

// An invariant the code under test broke: print it and abort (libFuzzer records the input).
[[noreturn]] inline void violated(const char* what) {
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
  std::abort();
}
#define DARK_FUZZ_ASSERT(cond) \
  do {                         \
    if (!(cond)) ::dark::fuzz::violated(#cond); \
  } while (0)

}  // namespace dark::fuzz
