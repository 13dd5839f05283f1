// metrics.jsonl (see metrics_log.h).
#include "train/metrics/metrics_log.h"

#include <sstream>
#include <string>

#include "core/error.h"
#include "core/file_io.h"

namespace dark::metrics {

MetricsLog::MetricsLog(const std::filesystem::path& path, std::int64_t keep_up_to_step) : path_(path) {
  if (keep_up_to_step >= 0 && std::filesystem::exists(path_)) {
    std::ifstream in(path_);
    std::ostringstream kept;
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.value("step", std::int64_t{0}) <= keep_up_to_step) kept << line << '\n';
    }
    write_file_atomic(path_, kept.str());
  } else if (keep_up_to_step < 0) {
    write_file_atomic(path_, "");
  }
  out_.open(path_, std::ios::app);
  DARK_CHECK(out_.good(), "cannot open ", path_.string(), " for writing");
}

void MetricsLog::write(const nlohmann::json& line) {
  out_ << line.dump() << '\n';
  out_.flush();
}

}  // namespace dark::metrics
