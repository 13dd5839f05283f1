// TensorBoard event files (train/formats/tensorboard_events.h, train/run_events.h): the
// CRC-32C against the published check values (RFC 3720's and the "123456789" check), the
// record framing read back (lengths, masked CRCs), and the scalars a metrics line gives.
// That TensorBoard itself reads our files and finds metrics.jsonl's numbers, also after a kill
// and a resume, is tests/tensorboard_check.sh's (it installs the tensorboard package).
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "tests/test_util.h"
#include "train/formats/tensorboard_events.h"
#include "train/run_events.h"

namespace dark::tensorboard_test {
namespace {

TEST(TensorboardEvents, Crc32cMatchesThePublishedCheckValues) {
  EXPECT_EQ(formats::crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(formats::crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720, B.4
  EXPECT_EQ(formats::crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<char>(i);
  EXPECT_EQ(formats::crc32c(ascending.data(), ascending.size()), 0x46DD794Eu);
  const std::uint32_t c = formats::crc32c("123456789", 9);
  EXPECT_EQ(formats::masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

// The records of an event file: each length and data checked against its masked CRC.
std::vector<std::string> read_records(const std::string& bytes) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_GE(bytes.size() - at, 12u);
    std::uint64_t length = 0;
    std::uint32_t length_crc = 0, data_crc = 0;
    std::memcpy(&length, bytes.data() + at, 8);
    std::memcpy(&length_crc, bytes.data() + at + 8, 4);
    EXPECT_EQ(length_crc, formats::masked_crc32c(bytes.data() + at, 8));
    const std::string data = bytes.substr(at + 12, length);
    std::memcpy(&data_crc, bytes.data() + at + 12 + length, 4);
    EXPECT_EQ(data_crc, formats::masked_crc32c(data.data(), data.size()));
    out.push_back(data);
    at += 12 + length + 4;
  }
  return out;
}

TEST(TensorboardEvents, RecordsAreFramedAndHoldTheirFields) {
  dark::testing::TempDir tmp;
  std::filesystem::path file;
  {
    formats::EventFileWriter w(tmp.path() / "run");
    w.scalar("loss", 7, 2.5, 1000.0);
    w.text("config", 0, "hello", 1000.0);
    w.restart(8, 1001.0);
    file = w.path();
  }
  EXPECT_EQ(file.parent_path(), tmp.path() / "run");
  EXPECT_EQ(file.filename().string().rfind("events.out.tfevents.", 0), 0u);
  const std::vector<std::string> records = read_records(read_file(file));
  ASSERT_EQ(records.size(), 4u);
  EXPECT_NE(records[0].find("brain.Event:2"), std::string::npos);  // file_version first
  // The scalar: wall_time (field 1, double), step (field 2, varint 7), then the summary.
  const std::string& scalar = records[1];
  ASSERT_EQ(scalar[0], '\x09');
  double wall = 0;
  std::memcpy(&wall, scalar.data() + 1, 8);
  EXPECT_EQ(wall, 1000.0);
  EXPECT_EQ(scalar.substr(9, 2), std::string("\x10\x07"));
  const float value = 2.5f;
  std::string value_bytes(4, '\0');
  std::memcpy(value_bytes.data(), &value, 4);
  EXPECT_NE(scalar.find(std::string("\x0a\x04loss\x15") + value_bytes), std::string::npos);
  EXPECT_NE(records[2].find("text"), std::string::npos);
  EXPECT_NE(records[2].find("hello"), std::string::npos);
  EXPECT_NE(records[3].find(std::string("\x3a\x02\x08\x01")), std::string::npos);  // session_log { status: START }
}

// scalars(): the values of one step as one event, each a Summary.Value (field 1 of Summary,
// itself field 5 of the Event) with its tag and float.
TEST(TensorboardEvents, ScalarsOfAStepAreOneRecord) {
  dark::testing::TempDir tmp;
  std::filesystem::path file;
  {
    formats::EventFileWriter w(tmp.path());
    w.scalars({{"loss", 2.5}, {"lr", 0.25}, {"eval/loss", -1.0}}, 9, 1000.0);
    w.scalars({}, 10, 1000.0);  // nothing: no record
    file = w.path();
  }
  const std::vector<std::string> records = read_records(read_file(file));
  ASSERT_EQ(records.size(), 2u);
  const std::string& event = records[1];
  EXPECT_EQ(event.substr(9, 2), std::string("\x10\x09"));  // step 9
  for (const auto& [tag, value] : std::vector<std::pair<std::string, float>>{{"loss", 2.5f}, {"lr", 0.25f}, {"eval/loss", -1.0f}}) {
    std::string value_bytes(4, '\0');
    std::memcpy(value_bytes.data(), &value, 4);
    // Summary.Value: length, tag (field 1), simple_value (field 2, fixed32).
    const std::string encoded = std::string("\x0a") + static_cast<char>(tag.size()) + tag + "\x15" + value_bytes;
    EXPECT_NE(event.find(std::string("\x0a") + static_cast<char>(encoded.size()) + encoded), std::string::npos) << tag;
  }
}

// Limits the size of any file this process writes (RLIMIT_FSIZE) while it lives: a write past
// the limit fails with EFBIG, as one fails on a full disk, for root as for anyone. SIGXFSZ,
// which such a write also raises, is ignored meanwhile.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limited = saved_;
    limited.rlim_cur = bytes;
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_handler_);
  }

 private:
  rlimit saved_{};
  void (*previous_handler_)(int) = nullptr;
};

// Runs fn with spdlog's default logger captured; returns what it logged.
template <class Fn>
std::string logged(Fn&& fn) {
  std::ostringstream captured;
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(captured)));
  try {
    fn();
  } catch (...) {
    spdlog::set_default_logger(previous);
    throw;
  }
  spdlog::set_default_logger(previous);
  return captured.str();
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A write that fails (the file may not grow: a full disk) is one warning naming the file and
// the cause; the run's later lines go on without a throw, and nothing more is written.
TEST(RunEvents, AFailedWriteWarnsOnceAndTheRunGoesOn) {
  dark::testing::TempDir tmp;
  formats::EventFileWriter writer(tmp.path());
  const std::filesystem::path file = writer.path();
  train::RunEvents events(std::move(writer));
  const nlohmann::json line = {{"step", 1}, {"loss", 3.5}, {"lr", 1e-3}};
  events.line(line);
  ASSERT_TRUE(events.writing());
  const std::uintmax_t size = std::filesystem::file_size(file);
  std::string log;
  {
    const FileSizeLimit limit(size);  // not one more byte
    log = logged([&] {
      for (int step = 2; step < 6; ++step) {
        nlohmann::json next = line;
        next["step"] = step;
        EXPECT_NO_THROW(events.line(next));
      }
      EXPECT_NO_THROW(events.text("sample", 5, "text"));
    });
  }
  EXPECT_FALSE(events.writing());
  EXPECT_EQ(occurrences(log, "TensorBoard events"), 1u) << log;
  EXPECT_NE(log.find(file.string()), std::string::npos) << log;
  EXPECT_NE(log.find("File too large"), std::string::npos) << log;  // EFBIG's message: the cause
  EXPECT_NE(log.find("metrics.jsonl"), std::string::npos) << log;
  EXPECT_EQ(std::filesystem::file_size(file), size);  // the whole records before the failure
  nlohmann::json after = line;
  after["step"] = 6;
  EXPECT_NO_THROW(events.line(after));  // after the warning: silently nothing
}

// Without the tolerance, the same failure is an error (what a checkpoint gets).
TEST(TensorboardEvents, AFailedWriteIsAnErrorOfTheWriter) {
  dark::testing::TempDir tmp;
  formats::EventFileWriter writer(tmp.path());
  const FileSizeLimit limit(std::filesystem::file_size(writer.path()));
  EXPECT_THROW(writer.scalar("loss", 1, 2.0, 1000.0), Error);
}

TEST(RunEvents, EveryNumberOfAMetricsLineIsAScalar) {
  const nlohmann::json line = nlohmann::json::parse(
      R"({"step": 12, "loss": 3.5, "skipped": true, "bad": null, "note": "x",
          "redraw": {"feature_epoch": 2, "held_out_loss_after": 4.25},
          "attention_stats": [{"sq_norm_p50": 1.5}, {"sq_norm_p50": null, "logit_sd_p99": 0.75}]})");
  const std::vector<std::pair<std::string, double>> expected = {
      {"attention_stats/0/sq_norm_p50", 1.5}, {"attention_stats/1/logit_sd_p99", 0.75}, {"loss", 3.5},
      {"redraw/feature_epoch", 2.0}, {"redraw/held_out_loss_after", 4.25}, {"skipped", 1.0}};
  EXPECT_EQ(train::line_scalars(line), expected);
}

}  // namespace
}  // namespace dark::tensorboard_test
