// metrics.jsonl: one JSON object per line per logged step or evaluation, flushed line by
// line so that a killed run keeps every line it wrote.
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace dark::metrics {

class MetricsLog {
 public:
  // A fresh run (keep_up_to_step < 0) starts an empty file; a resumed one keeps the lines of
  // steps up to the checkpoint's and drops the later ones, which are about to be redone.
  MetricsLog(const std::filesystem::path& path, std::int64_t keep_up_to_step);
  void write(const nlohmann::json& line);

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace dark::metrics
