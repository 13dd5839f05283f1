// Training on a GPU end to end (train(), run folders, checkpoints), against the CPU: the f32
// loss curve of every attention kind follows the CPU's within float rounding; bf16 mixed
// precision follows it within a few percent; activation checkpointing changes no bit; a
// checkpoint written on one device resumes on the other; a training step reads back nothing
// but its logged scalars (counted by the CUDA emulator); running out of device memory says how
// much and what to change; bf16 on the CPU is refused clearly.
// Runs on a GPU when there is one, and always in test_gpu_training_emulated.
#include <gtest/gtest.h>

#include <cmath>

#include "core/allocator.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/commands.h"
#include "train/config.h"
#include "train/train_step.h"
#include "train/trainer.h"
#include "train/training_run.h"
#include "train_test_util.h"

#if defined(DARK_TEST_ON_CUDA_EMULATOR)
#include "core/cuda/emulator/control.h"
#endif

namespace dark::train {
namespace {

using dark::testing::error_of;
using dark::testing::TempDir;
namespace fs = std::filesystem;

nlohmann::json on(nlohmann::json config, const TempDir& tmp, const std::string& run, const std::string& device,
                  const std::string& precision = "f32") {
  config["output"]["dir"] = (tmp.path() / run).string();
  config["training"]["device"] = device;
  config["training"]["precision"] = precision;
  return config;
}

void expect_curves_close(const std::map<std::int64_t, double>& got, const std::map<std::int64_t, double>& want,
                         double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [step, loss] : want) {
    ASSERT_TRUE(std::isfinite(got.at(step))) << what << " step " << step;
    EXPECT_NEAR(got.at(step), loss, rtol * loss) << what << " step " << step;
  }
}

TEST(GpuTraining, EveryKindFollowsTheCpuLossCurveInF32) {
  DARK_REQUIRE_GPU();
  for (const char* kind : {"softmax", "performer", "lfk", "darkformer"}) {
    TempDir tmp;
    auto config = tiny_config(tmp, "x", 10);
    config["attention"] = {{"kind", kind}, {"num_features", 16}, {"redraw_interval", 4}};
    if (std::string(kind) == "darkformer") config["attention"]["darkformer"] = {{"init", "whiten"}};
    train(parse_config(on(config, tmp, "cpu", "cpu")), {});
    train(parse_config(on(config, tmp, "gpu", "cuda")), {});
    expect_curves_close(losses(tmp.path() / "gpu"), losses(tmp.path() / "cpu"), 2e-4, kind);
  }
}

TEST(GpuTraining, Bf16MixedPrecisionFollowsTheF32Curve) {
  DARK_REQUIRE_GPU();
  for (const char* kind : {"softmax", "darkformer"}) {
    TempDir tmp;
    auto config = tiny_config(tmp, "x", 12);
    config["attention"] = {{"kind", kind}, {"num_features", 16}};
    train(parse_config(on(config, tmp, "f32", "cpu")), {});
    const TrainResult r = train(parse_config(on(config, tmp, "bf16", "cuda", "bf16")), {});
    const auto bf16 = losses(tmp.path() / "bf16");
    expect_curves_close(bf16, losses(tmp.path() / "f32"), 0.03, std::string(kind) + " bf16");
    EXPECT_LT(bf16.at(12), bf16.at(1)) << kind;
    EXPECT_TRUE(std::isfinite(r.final_eval.loss));
  }
}

TEST(GpuTraining, ActivationCheckpointingChangesNoBit) {
  DARK_REQUIRE_GPU();
  TempDir tmp;
  auto config = on(tiny_config(tmp, "x", 6), tmp, "plain", "cuda");
  train(parse_config(config), {});
  config["output"]["dir"] = (tmp.path() / "checked").string();
  config["training"]["activation_checkpointing"] = true;
  train(parse_config(config), {});
  EXPECT_EQ(losses(tmp.path() / "plain"), losses(tmp.path() / "checked"));
}

// A run cut after its step-10 checkpoint and resumed on the other device ends where the
// uninterrupted run on the first device ends, within float rounding.
TEST(GpuTraining, CheckpointsResumeOnTheOtherDevice) {
  DARK_REQUIRE_GPU();
  for (const auto& [first, second] : {std::pair{"cuda", "cpu"}, std::pair{"cpu", "cuda"}}) {
    TempDir tmp;
    const auto config = tiny_config(tmp, "x", 20);
    train(parse_config(on(config, tmp, "full", first)), {});
    fs::copy(tmp.path() / "full", tmp.path() / "cut", fs::copy_options::recursive);
    fs::remove_all(tmp.path() / "cut/checkpoints" / checkpoint_name(20));
    TrainOptions resume;
    resume.resume = true;
    train(parse_config(on(config, tmp, "cut", second)), resume);
    expect_curves_close(losses(tmp.path() / "cut"), losses(tmp.path() / "full"), 2e-4,
                        std::string(first) + " then " + second);
    const auto a = load_checkpoint(tmp.path() / "full/checkpoints" / checkpoint_name(20));
    const auto b = load_checkpoint(tmp.path() / "cut/checkpoints" / checkpoint_name(20));
    EXPECT_EQ(a.step, b.step);
    for (const auto& [name, t] : a.model) EXPECT_EQ(b.model.at(name).device(), Device::cpu()) << name;
  }
}

#if defined(DARK_TEST_ON_CUDA_EMULATOR)
// "Nothing in the step loop copies to the host except the scalars that are logged": the
// emulator counts device-to-host copies.
TEST(GpuTraining, AStepReadsBackOnlyItsScalars) {
  TempDir tmp;
  RunConfig config = parse_config(on(tiny_config(tmp, "x", 10), tmp, "run", "cuda"));
  TrainingRun run = start_run(config, false);
  train_step(run);  // first step: caches, feature draws
  const std::uint64_t before = cuda_emu::copies_to_host();
  train_step(run);
  train_step(run);
  EXPECT_EQ(cuda_emu::copies_to_host() - before, 2u) << "one read-back (loss and gradient norm) per step";
}

TEST(GpuTraining, OutOfMemorySaysHowMuchAndWhatShrinksIt) {
  TempDir tmp;
  auto json_config = on(tiny_config(tmp, "x", 6), tmp, "run", "cuda");
  json_config["model"]["d_model"] = 256;  // the embedding alone is 258 x 256 floats: more than the capacity
  json_config["training"]["memory_check"] = "off";  // the allocator's error, not the pre-flight's
  const auto config = parse_config(json_config);
  const std::size_t capacity = cuda_emu::memory_capacity();
  allocator_for(Device::cuda(0)).empty_cache();  // blocks earlier tests left cached count as used
  cuda_emu::set_memory_capacity(std::size_t{1} << 18);
  const std::string e = error_of([&] { train(config, {}); });
  cuda_emu::set_memory_capacity(capacity);
  for (const char* part : {"cuda:0: out of memory: asked for ", " MiB free of 0.25 MiB", "live tensors hold",
                           "training.batch_size (now 8", "data.seq_len (now 32)", "training.activation_checkpointing true",
                           "training.precision bf16"})
    EXPECT_NE(e.find(part), std::string::npos) << part << " in: " << e;

  // With the check on (the default), the pre-flight refuses before allocating anything.
  json_config["training"]["memory_check"] = "error";
  json_config["output"]["dir"] = tmp / "run2";
  cuda_emu::set_memory_capacity(std::size_t{1} << 18);
  const std::string refused = error_of([&] { train(parse_config(json_config), {}); });
  cuda_emu::set_memory_capacity(capacity);
  for (const char* part : {"memory: the run needs about", "free memory of cuda:0", "training.precision bf16"})
    EXPECT_NE(refused.find(part), std::string::npos) << part << " in: " << refused;
}
#endif

// The commands that run a trained model take --set training.device=cuda.
TEST(GpuTraining, EvalGenerateAndProbeRunOnTheGpu) {
  DARK_REQUIRE_GPU();
  TempDir tmp;
  train(parse_config(on(tiny_config(tmp, "x", 6), tmp, "run", "cpu")), {});
  const std::string run = (tmp.path() / "run").string(), gpu = "training.device=cuda";
  EXPECT_EQ(eval_command({"--checkpoint", run, "--set", gpu}), 0);
  EXPECT_EQ(generate_command({"--checkpoint", run, "--prompt", "ka", "--max-tokens", "4", "--set", gpu}), 0);
  EXPECT_EQ(probe_command({"--checkpoint", run, "--features", "4", "--redraws", "1", "--batches", "1",
                           "--calibration-batches", "1", "--json", tmp / "probe.json", "--set", gpu}),
            0);
}

TEST(GpuTraining, CommandsOnACheckpointSetOnlyTheDevice) {
  TempDir tmp;
  train(parse_config(on(tiny_config(tmp, "x", 6), tmp, "run", "cpu")), {});
  EXPECT_EQ(error_of([&] { eval_command({"--checkpoint", (tmp.path() / "run").string(), "--set", "model.d_model=8"}); }),
            "--set model.d_model=8: only training.device may be set here (the model is the checkpoint's)");
}

TEST(GpuTraining, Bf16OnTheCpuIsAClearError) {
  TempDir tmp;
  const std::string e = error_of([&] { train(parse_config(on(tiny_config(tmp, "x", 6), tmp, "run", "cpu", "bf16")), {}); });
  EXPECT_EQ(e.rfind("config: training.precision: bf16 mixed precision runs on a GPU", 0), 0u) << e;
  // it says which of the instruction sets bf16 on a CPU needs this machine has
  const bool any = __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
  EXPECT_NE(e.find(any ? "which darkformer does not use yet" : "neither AVX512_BF16 nor AMX-BF16"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(tmp.path() / "run")) << "nothing written";
}

}  // namespace
}  // namespace dark::train
