// A run's TensorBoard event file (see run_events.h).
#include "train/run_events.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <exception>
#include <filesystem>
#include <utility>
#include <vector>

#include "core/file_io.h"

namespace dark::train {
namespace {

void flatten(const std::string& tag, const nlohmann::json& value, std::vector<std::pair<std::string, double>>& out) {
  if (value.is_number()) {
    out.emplace_back(tag, value.get<double>());
  } else if (value.is_boolean()) {
    out.emplace_back(tag, value.get<bool>() ? 1.0 : 0.0);
  } else if (value.is_object()) {
    for (const auto& [key, child] : value.items()) flatten(tag.empty() ? key : tag + "/" + key, child, out);
  } else if (value.is_array()) {
    for (std::size_t i = 0; i < value.size(); ++i) flatten(tag + "/" + std::to_string(i), value[i], out);
  }  // null (a non-finite value) and text: no scalar
}

}  // namespace

std::vector<std::pair<std::string, double>> line_scalars(const nlohmann::json& line) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [key, value] : line.items())
    if (key != "step") flatten(key, value, out);
  return out;
}

template <class Write>
void RunEvents::write(Write&& write) {
  if (!writer_) return;
  try {
    write(*writer_);
  } catch (const std::exception& e) {
    spdlog::warn("TensorBoard events: {}; no more events are written this run (metrics.jsonl has every number; "
                 "output.tensorboard false turns the file off)",
                 e.what());
    writer_.reset();
  }
}

RunEvents::RunEvents(formats::EventFileWriter writer) : writer_(std::move(writer)) {}

RunEvents::RunEvents(const TrainingRun& run) {
  if (!run.writes() || !run.config.output.tensorboard) return;
  try {
    writer_.emplace(run.dir);
  } catch (const std::exception& e) {
    spdlog::warn("TensorBoard events: {}; the run goes on without an event file (metrics.jsonl has every number)",
                 e.what());
    return;
  }
  const double now = formats::wall_time_now();
  if (run.resumed) {
    write([&](formats::EventFileWriter& w) { w.restart(run.step + 1, now); });
    return;
  }
  const std::filesystem::path transfer = run.dir / "transfer.json";
  if (run.config.finetune.transfer.steps > 0 && std::filesystem::exists(transfer)) {
    write([&](formats::EventFileWriter& w) {
      std::vector<std::pair<std::string, double>> scalars;
      flatten("transfer", nlohmann::json::parse(read_file(transfer)), scalars);
      w.scalars(scalars, 0, now);
    });
  }
  // Indented four spaces: a code block in TensorBoard's markdown.
  std::string config = "    ";
  for (const char c : to_json(run.config).dump(2)) config += c == '\n' ? std::string("\n    ") : std::string(1, c);
  write([&](formats::EventFileWriter& w) { w.text("config", 0, config, now); });
}

void RunEvents::line(const nlohmann::json& line) {
  const std::int64_t step = line.at("step").get<std::int64_t>();
  write([&](formats::EventFileWriter& w) { w.scalars(line_scalars(line), step, formats::wall_time_now()); });
}

void RunEvents::stability(const metrics::StabilityReport& report) {
  write([&](formats::EventFileWriter& w) {
    const double now = formats::wall_time_now();
    for (const auto& [tag, spikes] : {std::pair{"stability/loss_spike_height", &report.loss_spikes},
                                       std::pair{"stability/grad_spike_height", &report.grad_spikes}})
      for (const metrics::Spike& s : *spikes)
        if (std::isfinite(s.height)) w.scalar(tag, s.step, s.height, now);  // as stability.json: null otherwise
    if (report.diverged) w.scalar("stability/diverged", report.divergence_step, 1.0, now);
  });
}

void RunEvents::text(const std::string& tag, std::int64_t step, const std::string& markdown) {
  write([&](formats::EventFileWriter& w) { w.text(tag, step, markdown, formats::wall_time_now()); });
}

}  // namespace dark::train
