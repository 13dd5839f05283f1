// A run's TensorBoard event file (see run_events.h).
#include "train/run_events.h"

#include <cmath>
#include <filesystem>
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

RunEvents::RunEvents(const TrainingRun& run) {
  if (!run.writes() || !run.config.output.tensorboard) return;
  writer_.emplace(run.dir);
  const double now = formats::wall_time_now();
  if (run.resumed) {
    writer_->restart(run.step + 1, now);
    return;
  }
  const std::filesystem::path transfer = run.dir / "transfer.json";
  if (run.config.finetune.transfer.steps > 0 && std::filesystem::exists(transfer)) {
    std::vector<std::pair<std::string, double>> scalars;
    flatten("transfer", nlohmann::json::parse(read_file(transfer)), scalars);
    for (const auto& [tag, value] : scalars) writer_->scalar(tag, 0, value, now);
  }
  {
    // Indented four spaces: a code block in TensorBoard's markdown.
    std::string config = "    ";
    for (const char c : to_json(run.config).dump(2)) config += c == '\n' ? std::string("\n    ") : std::string(1, c);
    writer_->text("config", 0, config, now);
  }
}

void RunEvents::line(const nlohmann::json& line) {
  if (!writer_) return;
  const std::int64_t step = line.at("step").get<std::int64_t>();
  const double now = formats::wall_time_now();
  for (const auto& [tag, value] : line_scalars(line)) writer_->scalar(tag, step, value, now);
}

void RunEvents::stability(const metrics::StabilityReport& report) {
  if (!writer_) return;
  const double now = formats::wall_time_now();
  for (const auto& [tag, spikes] : {std::pair{"stability/loss_spike_height", &report.loss_spikes},
                                     std::pair{"stability/grad_spike_height", &report.grad_spikes}})
    for (const metrics::Spike& s : *spikes)
      if (std::isfinite(s.height)) writer_->scalar(tag, s.step, s.height, now);  // as stability.json: null otherwise
  if (report.diverged) writer_->scalar("stability/diverged", report.divergence_step, 1.0, now);
}

void RunEvents::text(const std::string& tag, std::int64_t step, const std::string& markdown) {
  if (writer_) writer_->text(tag, step, markdown, formats::wall_time_now());
}

}  // namespace dark::train
