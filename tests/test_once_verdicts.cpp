// core/cuda/once_verdicts.h, the verdict table of the GPU kernels' self-checks: a verdict is
// reached once per key; reaching one (GPU work, in the self-checks) holds up neither the
// verdicts of other keys nor anything else; a second caller of the same key waits for the
// first one's verdict instead of checking again; a check that throws leaves its key open.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>

#include "core/cuda/once_verdicts.h"

namespace dark::testing {
namespace {

using cuda::OnceVerdicts;
using namespace std::chrono_literals;

TEST(OnceVerdicts, EachKeyIsDecidedOnceAndRemembered) {
  OnceVerdicts<int> verdicts;
  int decisions = 0;
  EXPECT_FALSE(verdicts.find(1).has_value());
  EXPECT_TRUE(verdicts.get(1, [&] { return ++decisions, true; }));
  EXPECT_FALSE(verdicts.get(2, [&] { return ++decisions, false; }));
  EXPECT_TRUE(verdicts.get(1, [&] { return ++decisions, false; }));
  EXPECT_FALSE(verdicts.get(2, [&] { return ++decisions, true; }));
  EXPECT_EQ(decisions, 2);
  EXPECT_EQ(verdicts.find(1), std::optional<bool>(true));
  EXPECT_EQ(verdicts.find(2), std::optional<bool>(false));
}

// Thread A's check of key 1 waits for thread B's check of key 2 to have run: with one lock
// held across a check (what the self-checks did), B would wait for A and A would give up.
TEST(OnceVerdicts, ChecksOfDistinctKeysRunAtTheSameTime) {
  OnceVerdicts<int> verdicts;
  std::promise<void> b_checked;
  std::future<void> b_done = b_checked.get_future();
  std::future<bool> a = std::async(std::launch::async, [&] {
    return verdicts.get(1, [&] { return b_done.wait_for(20s) == std::future_status::ready; });
  });
  std::this_thread::sleep_for(50ms);  // A is inside its check (not needed for correctness)
  std::future<bool> b = std::async(std::launch::async, [&] {
    return verdicts.get(2, [&] {
      b_checked.set_value();
      return true;
    });
  });
  EXPECT_TRUE(b.get());
  EXPECT_TRUE(a.get()) << "the check of key 1 did not see key 2's check run while it ran";
}

TEST(OnceVerdicts, ASecondCallerOfTheSameKeyWaitsForTheFirstsVerdict) {
  OnceVerdicts<int> verdicts;
  std::atomic<int> decisions{0};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> first_inside;
  std::future<bool> first = std::async(std::launch::async, [&] {
    return verdicts.get(7, [&] {
      ++decisions;
      first_inside.set_value();
      released.wait();
      return false;
    });
  });
  first_inside.get_future().wait();
  std::future<bool> second = std::async(std::launch::async, [&] {
    return verdicts.get(7, [&] { return ++decisions, true; });
  });
  EXPECT_EQ(second.wait_for(100ms), std::future_status::timeout) << "the second caller did not wait";
  release.set_value();
  EXPECT_FALSE(first.get());
  EXPECT_FALSE(second.get()) << "the second caller reached its own verdict";
  EXPECT_EQ(decisions.load(), 1);
}

TEST(OnceVerdicts, ACheckThatThrowsLeavesItsKeyUndecided) {
  OnceVerdicts<int> verdicts;
  EXPECT_THROW(verdicts.get(3, []() -> bool { throw std::runtime_error("no device"); }), std::runtime_error);
  EXPECT_FALSE(verdicts.find(3).has_value());
  EXPECT_TRUE(verdicts.get(3, [] { return true; }));
}

}  // namespace
}  // namespace dark::testing
