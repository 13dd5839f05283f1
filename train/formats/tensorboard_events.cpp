// TensorBoard event files (see tensorboard_events.h).
#include "train/formats/tensorboard_events.h"

#include <unistd.h>

#include <atomic>
#include <boost/crc.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.h"

namespace dark::formats {
namespace {

// ---- the protocol-buffer wire format: a field is its key (number << 3 | wire type), then
// a varint (type 0), 8 little-endian bytes (type 1), a length and bytes (type 2) or 4
// little-endian bytes (type 5) ----
void varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void key(std::string& out, int field, int wire_type) { varint(out, static_cast<std::uint64_t>(field) << 3 | wire_type); }
void varint_field(std::string& out, int field, std::uint64_t v) {
  key(out, field, 0);
  varint(out, v);
}
template <typename T>
void little_endian(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // x86 and every target we build for are little-endian
  out.append(bytes, sizeof(T));
}
void double_field(std::string& out, int field, double v) {
  key(out, field, 1);
  little_endian(out, v);
}
void float_field(std::string& out, int field, float v) {
  key(out, field, 5);
  little_endian(out, v);
}
void bytes_field(std::string& out, int field, const std::string& bytes) {
  key(out, field, 2);
  varint(out, bytes.size());
  out += bytes;
}

// tensorflow.Event: wall_time 1 (double), step 2 (int64), file_version 3 (string), summary 5,
// session_log 7 (6 is the deprecated log_message).
std::string event(double wall_time, std::int64_t step) {
  std::string e;
  double_field(e, 1, wall_time);
  varint_field(e, 2, static_cast<std::uint64_t>(step));
  return e;
}

// Summary: value 1 (repeated Summary.Value). Summary.Value: tag 1, simple_value 2 (float),
// tensor 8 (TensorProto), metadata 9 (SummaryMetadata: plugin_data 1 = PluginData:
// plugin_name 1, content 2).
std::string summary_event(double wall_time, std::int64_t step, const std::vector<std::string>& values) {
  std::string summary;
  for (const std::string& value : values) bytes_field(summary, 1, value);
  std::string e = event(wall_time, step);
  bytes_field(e, 5, summary);
  return e;
}

std::string scalar_value(const std::string& tag, double value) {
  std::string v;
  bytes_field(v, 1, tag);
  float_field(v, 2, static_cast<float>(value));
  return v;
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data, size);
  return crc.checksum();
}

std::uint32_t masked_crc32c(const void* data, std::size_t size) {
  const std::uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

EventFileWriter::EventFileWriter(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  // TensorBoard reads a folder's files in name order: the seconds first, then a counter so
  // that two writers of one process and second get files of their own.
  static std::atomic<int> counter{0};
  const double now = wall_time_now();
  path_ = dir / str("events.out.tfevents.", static_cast<std::int64_t>(now), ".", host, ".", getpid(), ".", counter++);
  out_.open(path_, std::ios::binary | std::ios::trunc);
  DARK_CHECK(out_.good(), "cannot open ", path_.string(), " for writing");
  std::string e = event(now, 0);
  bytes_field(e, 3, "brain.Event:2");
  write_record(e);
}

void EventFileWriter::scalar(const std::string& tag, std::int64_t step, double value, double wall_time) {
  write_record(summary_event(wall_time, step, {scalar_value(tag, value)}));
}

void EventFileWriter::scalars(const std::vector<std::pair<std::string, double>>& values, std::int64_t step,
                              double wall_time) {
  if (values.empty()) return;
  std::vector<std::string> encoded;
  encoded.reserve(values.size());
  for (const auto& [tag, value] : values) encoded.push_back(scalar_value(tag, value));
  write_record(summary_event(wall_time, step, encoded));
}

void EventFileWriter::text(const std::string& tag, std::int64_t step, const std::string& markdown, double wall_time) {
  // TensorProto: dtype 1 (DT_STRING = 7), tensor_shape 2 (empty: a scalar), string_val 8.
  std::string tensor;
  varint_field(tensor, 1, 7);
  bytes_field(tensor, 2, "");
  bytes_field(tensor, 8, markdown);
  std::string plugin;
  bytes_field(plugin, 1, "text");
  std::string metadata;
  bytes_field(metadata, 1, plugin);
  std::string v;
  bytes_field(v, 1, tag);
  bytes_field(v, 8, tensor);
  bytes_field(v, 9, metadata);
  write_record(summary_event(wall_time, step, {v}));
}

void EventFileWriter::restart(std::int64_t step, double wall_time) {
  std::string log;  // SessionLog: status 1 (START = 1)
  varint_field(log, 1, 1);
  std::string e = event(wall_time, step);
  bytes_field(e, 7, log);
  write_record(e);
}

void EventFileWriter::write_record(const std::string& data) {
  std::string record;
  const std::uint64_t length = data.size();
  little_endian(record, length);
  little_endian(record, masked_crc32c(record.data(), sizeof(length)));
  record += data;
  little_endian(record, masked_crc32c(data.data(), data.size()));
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
  out_.flush();
  DARK_CHECK(out_.good(), "writing ", path_.string(), " failed: ", std::strerror(errno));
}

}  // namespace dark::formats
