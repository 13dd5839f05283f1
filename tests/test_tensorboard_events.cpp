// TensorBoard event files (train/formats/tensorboard_events.h, train/run_events.h): the
// CRC-32C against the published check values (RFC 3720's and the "123456789" check), the
// record framing read back (lengths, masked CRCs), and the scalars a metrics line gives.
// That TensorBoard itself reads our files and finds metrics.jsonl's numbers, also after a kill
// and a resume, is tests/tensorboard_check.sh's (it installs the tensorboard package).
#include <gtest/gtest.h>

#include <cstring>
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
