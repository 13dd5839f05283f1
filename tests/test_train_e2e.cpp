// End to end through train(): a tiny model learns a small text; an interrupted run resumed
// from its checkpoint reproduces the uninterrupted loss curve bit for bit; non-finite steps
// are skipped, then abort the run after training.max_consecutive_skips; a fresh run refuses
// to overwrite a run folder that holds checkpoints; a resume may move to another device; a
// checkpoint tensor of another dtype is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "nn/model.h"
#include "test_util.h"
#include "train_test_util.h"
#include "train/formats/checkpoint.h"
#include "train/config.h"
#include "train/model_builder.h"
#include "train/trainer.h"

namespace dark::train {
namespace {

using dark::testing::TempDir;
namespace fs = std::filesystem;

TEST(TrainEndToEnd, TinyModelLearnsASmallText) {
  TempDir tmp;
  const TrainResult r = train(parse_config(tiny_config(tmp, "run", 150)), {});
  // Byte-level uniform guessing costs ln(258) = 5.55 nats; measured: ~2.0 after 150 steps.
  EXPECT_LT(r.final_eval.loss, 2.6);
  EXPECT_GT(r.final_eval.accuracy, 0.3);
  EXPECT_TRUE(fs::exists(tmp.path() / "run/config.json"));
  EXPECT_TRUE(fs::exists(tmp.path() / "run/sample.txt"));
  EXPECT_EQ(losses(tmp.path() / "run").size(), 150u);
}

// The first progress line (before any timed step) shows that step's own rate and an ETA from
// it, marked, never "0 tok/s | ETA 0s"; the later ones the timed average.
TEST(TrainEndToEnd, TheFirstProgressLineEstimatesFromItsOwnStep) {
  TempDir tmp;
  std::ostringstream captured;
  const auto previous = spdlog::default_logger();
  auto logger = std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(captured));
  spdlog::set_default_logger(logger);
  auto config = tiny_config(tmp, "run", 6);
  config["training"]["log_interval"] = 3;
  try {
    train(parse_config(config), {});
  } catch (...) {
    spdlog::set_default_logger(previous);
    throw;
  }
  spdlog::set_default_logger(previous);
  std::vector<std::string> steps;
  std::istringstream lines(captured.str());
  for (std::string line; std::getline(lines, line);)
    if (line.find(" tok/s") != std::string::npos) steps.push_back(line);
  ASSERT_EQ(steps.size(), 3u) << captured.str();  // steps 1, 3 and 6
  EXPECT_NE(steps[0].find("step 1/6"), std::string::npos) << steps[0];
  EXPECT_NE(steps[0].find("tok/s (first step) | ETA <= "), std::string::npos) << steps[0];
  EXPECT_EQ(steps[0].find("| 0 tok/s"), std::string::npos) << steps[0];
  EXPECT_EQ(steps[1].find("(first step)"), std::string::npos) << steps[1];
  EXPECT_EQ(steps[1].find("| 0 tok/s"), std::string::npos) << steps[1];
  EXPECT_NE(steps[2].find("step 6/6"), std::string::npos) << steps[2];
  EXPECT_NE(steps[2].find("ETA 0s"), std::string::npos) << steps[2];
}

TEST(TrainEndToEnd, ResumeReproducesTheUninterruptedLossCurveBitForBit) {
  TempDir tmp;
  train(parse_config(tiny_config(tmp, "full", 30)), {});
  // Simulate a run killed after its step-20 checkpoint: copy it and drop what came later.
  fs::copy(tmp.path() / "full", tmp.path() / "cut", fs::copy_options::recursive);
  fs::remove_all(tmp.path() / "cut" / "checkpoints" / formats::checkpoint_name(30));
  TrainOptions resume;
  resume.resume = true;
  train(parse_config(tiny_config(tmp, "cut", 30)), resume);

  const auto a = losses(tmp.path() / "full"), b = losses(tmp.path() / "cut");
  ASSERT_EQ(a.size(), 30u);
  ASSERT_EQ(b.size(), 30u);
  for (std::int64_t step = 1; step <= 30; ++step) EXPECT_EQ(a.at(step), b.at(step)) << "step " << step;  // bitwise
  const auto wa = formats::load_checkpoint(tmp.path() / "full/checkpoints" / formats::checkpoint_name(30));
  const auto wb = formats::load_checkpoint(tmp.path() / "cut/checkpoints" / formats::checkpoint_name(30));
  for (const auto& [name, t] : wa.model) EXPECT_EQ(t.to_vector<float>(), wb.model.at(name).to_vector<float>()) << name;
  for (const auto& [name, t] : wa.optimizer)
    if (t.dtype() == DType::f32) EXPECT_EQ(t.to_vector<float>(), wb.optimizer.at(name).to_vector<float>()) << name;
}

TEST(TrainEndToEnd, ResumeRefusesADifferentConfig) {
  TempDir tmp;
  train(parse_config(tiny_config(tmp, "run", 10)), {});
  auto changed = tiny_config(tmp, "run", 20);
  changed["optimizer"]["lr"] = 0.02;
  TrainOptions resume;
  resume.resume = true;
  try {
    train(parse_config(changed), resume);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config differs"), std::string::npos) << e.what();
  }
  // training.steps and training.device may change: extending the run on any device works.
  auto extended = tiny_config(tmp, "run", 20);
  extended["training"]["device"] = "auto";
  train(parse_config(extended), resume);
  EXPECT_EQ(losses(tmp.path() / "run").size(), 20u);
}

TEST(TrainEndToEnd, ACheckpointTensorOfAnotherDtypeIsAnErrorNamingIt) {
  TempDir tmp;
  train(parse_config(tiny_config(tmp, "run", 5)), {});
  formats::CheckpointData ck = formats::load_checkpoint(tmp.path() / "run/checkpoints" / formats::checkpoint_name(5));
  const RunConfig config = parse_config(ck.state.at("config"));
  auto model = build_model(config);
  ck.model["model.norm.weight"] = ck.model["model.norm.weight"].to(DType::f64);
  try {
    load_trained_state(*model, ck, config, "checkpoint step_00000005");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "checkpoint step_00000005: parameter 'model.norm.weight' is f64, the model expects f32");
  }
}

TEST(TrainEndToEnd, FreshRunDoesNotOverwriteCheckpoints) {
  TempDir tmp;
  train(parse_config(tiny_config(tmp, "run", 10)), {});
  const auto before = fs::last_write_time(tmp.path() / "run/checkpoints" / formats::checkpoint_name(10) / "model.safetensors");
  try {
    train(parse_config(tiny_config(tmp, "run", 10)), {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--resume"), std::string::npos) << e.what();
  }
  EXPECT_EQ(fs::last_write_time(tmp.path() / "run/checkpoints" / formats::checkpoint_name(10) / "model.safetensors"), before);
}

TEST(TrainEndToEnd, NonFiniteStepsAreSkippedThenAbortTheRun) {
  TempDir tmp;
  auto poison = [](std::int64_t step, nn::CausalLM& model, std::int64_t from, std::int64_t to) {
    Tensor& w = *model.model.norm.weight;
    w.fill_(step >= from && step < to ? NAN : 1.0);
  };
  // One poisoned step (step 4) is skipped and training continues.
  TrainOptions once;
  once.before_step = [&](std::int64_t step, nn::CausalLM& m) { if (step == 4 || step == 5) poison(step, m, 4, 5); };
  auto cfg = tiny_config(tmp, "once", 12);
  train(parse_config(cfg), once);
  int skipped = 0;
  for (const metrics::StepRecord& s : metrics::read_metrics(tmp.path() / "once/metrics.jsonl").steps) skipped += s.skipped;
  EXPECT_EQ(skipped, 1);

  // Poisoned from step 3 on: skips 3..8 (6 > max_consecutive_skips = 5) end the run.
  TrainOptions always;
  always.before_step = [&](std::int64_t step, nn::CausalLM& m) { if (step >= 3) poison(step, m, 3, 1000); };
  try {
    train(parse_config(tiny_config(tmp, "always", 30)), always);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("6 consecutive steps"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dark::train
