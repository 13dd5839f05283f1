// Flush-to-zero of subnormal floats (core/cpu/float_mode.h, training.flush_denormals): the
// mode reaches every OpenMP thread and the threads made after it, a scope restores what it
// found, and a training run computes under the mode its config asks for. Each check is an
// arithmetic one: a product whose exact value is subnormal is 0 only when flushing is on.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <thread>
#include <vector>

#include "core/cpu/float_mode.h"
#include "test_util.h"
#include "train/config.h"
#include "train/trainer.h"
#include "train_test_util.h"

namespace dark {
namespace {

// 1e-30 * 1e-10 = 1e-40, below float's smallest normal (1.18e-38): a subnormal, or 0 under FTZ.
// volatile: the compiler must not fold the product at compile time.
bool product_flushed() {
  volatile float a = 1e-30f, b = 1e-10f;
  const float product = a * b;
  return product == 0.0f;
}
// A subnormal input: 1e-40 * 1 reads as 0 under DAZ (and FPCR.FZ), else stays 1e-40.
bool input_flushed() {
  volatile float subnormal = 1e-40f, one = 1.0f;
  const float product = subnormal * one;
  return product == 0.0f;
}

// Whether every thread of an OpenMP team of `threads` computes with subnormals flushed
// (true), none does (false); a mix fails the test.
bool team_flushes(int threads) {
  std::vector<int> flushed(threads, -1);
#pragma omp parallel num_threads(threads)
  {
    const int id = omp_get_thread_num();
    flushed[id] = product_flushed() && input_flushed() && cpu::flushing_denormals();
  }
  for (int f : flushed) EXPECT_EQ(f, flushed[0]) << "the OpenMP threads disagree";
  return flushed[0] == 1;
}

TEST(FlushDenormals, OffByDefaultInAProcess) {
  if (!cpu::flush_denormals_supported()) GTEST_SKIP() << "no flush-to-zero control on this architecture";
  volatile float a = 1e-30f, b = 1e-10f;
  const float product = a * b;
  EXPECT_EQ(std::fpclassify(product), FP_SUBNORMAL);
  EXPECT_FALSE(cpu::flushing_denormals());
  EXPECT_FALSE(team_flushes(2));
}

TEST(FlushDenormals, ScopeReachesThePoolAndNewThreadsAndRestores) {
  if (!cpu::flush_denormals_supported()) GTEST_SKIP() << "no flush-to-zero control on this architecture";
  omp_set_num_threads(2);
  team_flushes(2);  // the pool exists before the scope, as in a run after earlier work
  {
    const cpu::FlushDenormalsScope scope(true);
    EXPECT_TRUE(product_flushed());
    EXPECT_TRUE(input_flushed());
    EXPECT_TRUE(team_flushes(2));  // the threads that existed
    EXPECT_TRUE(team_flushes(4));  // threads OpenMP starts now inherit the mode
    bool thread_flushed = false;
    std::thread([&] { thread_flushed = product_flushed() && input_flushed(); }).join();
    EXPECT_TRUE(thread_flushed);
    {
      const cpu::FlushDenormalsScope inner(false);  // nested: off inside, on again after
      EXPECT_FALSE(product_flushed());
      EXPECT_FALSE(team_flushes(4));
    }
    EXPECT_TRUE(team_flushes(4));
  }
  EXPECT_FALSE(product_flushed());
  EXPECT_FALSE(input_flushed());
  EXPECT_FALSE(team_flushes(4));
  omp_set_num_threads(2);
}

// train() runs its steps under training.flush_denormals and restores the mode after.
TEST(FlushDenormals, TrainingRunsUnderItsConfigsMode) {
  if (!cpu::flush_denormals_supported()) GTEST_SKIP() << "no flush-to-zero control on this architecture";
  testing::TempDir tmp;
  for (const bool flush : {true, false}) {
    nlohmann::json config = train::tiny_config(tmp, flush ? "flush" : "ieee", 3);
    config["training"]["flush_denormals"] = flush;
    config["schedule"]["warmup_steps"] = 1;
    int steps_seen = 0, steps_flushed = 0;
    train::TrainOptions options;
    options.before_step = [&](std::int64_t, nn::CausalLM&) {
      ++steps_seen;
      steps_flushed += product_flushed() && team_flushes(omp_get_max_threads());
    };
    train::train(train::parse_config(config), options);
    EXPECT_EQ(steps_seen, 3);
    EXPECT_EQ(steps_flushed, flush ? 3 : 0) << "training.flush_denormals " << flush;
    EXPECT_FALSE(product_flushed()) << "train() left the mode on";
  }
}

}  // namespace
}  // namespace dark
