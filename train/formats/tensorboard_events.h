// TensorBoard event files, which `tensorboard --logdir` reads (and W&B and most trackers
// import): a file events.out.tfevents.<seconds>.<host>.<pid>.<n> of records, each record
//   uint64 length | uint32 masked CRC-32C of the length | data | uint32 masked CRC-32C of data
// (little-endian; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8), each data one serialized
// tensorflow.Event protocol buffer. We write the few messages we need with a small encoder of
// the protocol-buffer wire format (field numbers of tensorflow/core/util/event.proto and
// summary.proto; see the .cpp) rather than generate code with protoc: five messages with
// fixed fields, and TensorBoard's own reader checks them (tests/tensorboard_check.py). The
// CRC-32C is Boost.CRC's with the Castagnoli polynomial.
//
// Writing throws dark::Error when the file cannot be opened or a write fails (the disk is
// full, ...); train/run_events.h turns that into a warning, since a plot must not end a run.
// Every record is flushed as it is written, so a killed run leaves a file TensorBoard reads
// up to its last whole record. A resumed run appends a new file that opens with a SessionLog
// START at the step it continues from: TensorBoard then drops the earlier files' events at
// that step and later, which the resumed run redoes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace dark::formats {

// CRC-32C (Castagnoli) of `size` bytes, and TensorBoard's masked form of it.
std::uint32_t crc32c(const void* data, std::size_t size);
std::uint32_t masked_crc32c(const void* data, std::size_t size);

class EventFileWriter {
 public:
  // Creates the folder and a new event file in it, opened with its file_version event.
  explicit EventFileWriter(const std::filesystem::path& dir);

  // A scalar (TensorBoard's Scalars tab) at `step`; wall_time in seconds since the epoch.
  void scalar(const std::string& tag, std::int64_t step, double value, double wall_time);
  // Several scalars at one step as one event (a Summary of several values): one record and one
  // flush, where scalar() each time would make one of each per value.
  void scalars(const std::vector<std::pair<std::string, double>>& values, std::int64_t step, double wall_time);
  // A text (the Text tab: markdown) at `step`.
  void text(const std::string& tag, std::int64_t step, const std::string& markdown, double wall_time);
  // A restart at `step` (SessionLog START): events of earlier files at steps >= step are dropped.
  void restart(std::int64_t step, double wall_time);

  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::filesystem::path path_;
  std::ofstream out_;
};

// Seconds since the epoch, as event files stamp their events.
double wall_time_now();

}  // namespace dark::formats
