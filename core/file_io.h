// Durable file I/O for run outputs (configs, safetensors, checkpoints): atomic writes
// (write `<path>.tmp-<pid>`, fsync, rename onto the final name, fsync the directory), whole-
// file reads and read-only memory maps, and SHA-256 for checkpoint checksums.
// Invariant: a file written through AtomicFileWriter either has its complete new contents
// under its final name or does not change; readers never see a half-written file.
// Every failed system call throws dark::Error naming the call, the path, the OS reason and
// the source location.
#pragma once
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/error.h"

namespace dark {

namespace detail {
[[noreturn]] void throw_io_error(const char* call, const std::filesystem::path& path, int error,
                                 const char* file, int line);
}  // namespace detail

// Throws dark::Error "CALL(PATH): <strerror(errno)> (FILE:LINE)" when cond is
// false; reads errno right after the failed call.
#define DARK_IO_CHECK(cond, call, path)                                                        \
  do {                                                                                         \
    if (!(cond)) ::dark::detail::throw_io_error(call, path, errno, __FILE__, __LINE__); \
  } while (0)

// Streams bytes into `<path>.tmp-<pid>`; commit() flushes them to disk and renames the temp
// file onto `path` (atomically replacing an existing file), then fsyncs the directory.
// Destroying a writer that was not committed removes the temp file.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::filesystem::path path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, std::size_t size);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // Overwrites bytes at `offset` (e.g. a header filled in last) without moving the end.
  void write_at(const void* data, std::size_t size, std::uint64_t offset);
  void commit();
  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& temp_path() const { return temp_; }

 private:
  std::filesystem::path path_;
  std::filesystem::path temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Replaces `path` atomically with `bytes` (AtomicFileWriter in one call).
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);
// The whole file; throws naming the path when it cannot be opened or read.
std::string read_file(const std::filesystem::path& path);
// fsync on a directory: makes renames and creations inside it durable.
void fsync_directory(const std::filesystem::path& dir);

// A fresh directory under the system's temporary directory ($TMPDIR or /tmp), removed with
// its contents when the object is destroyed. `purpose` becomes part of its name.
class ScratchDirectory {
 public:
  explicit ScratchDirectory(const std::string& purpose);
  ~ScratchDirectory();
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A read-only private mapping of a whole file (empty files map to size 0, data nullptr).
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

// Incremental SHA-256 (FIPS 180-4). hex_digest() finishes the hash: call it once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t size);
  std::string hex_digest();  // 64 lowercase hex digits, as sha256sum prints

 private:
  void compress(const std::uint8_t* block);
  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

std::string sha256_hex(const void* data, std::size_t size);
// SHA-256 of a file's contents, read through a memory map.
std::string sha256_file(const std::filesystem::path& path);

}  // namespace dark
