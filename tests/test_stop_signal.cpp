// Preemption-safe stops (train/stop_signal.h):
//  - the first SIGTERM or SIGINT is a request, a repeat within a second is the same request,
//    a later one ends the process at once; a signal the process was started ignoring stays
//    ignored; the mask and handlers are restored, or after a stop the signals are ignored
//    (forked children, so that the default action can be seen);
//  - `darkformer train` sent SIGTERM in the middle of a run finishes its step, checkpoints it,
//    says so and exits 75; --resume then reproduces the uninterrupted run bit for bit (every
//    metrics line and the final weights and optimizer state, byte for byte).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "child_process.h"
#include "train/formats/checkpoint.h"
#include "train/stop_signal.h"
#include "train_test_util.h"

namespace dark::train {
namespace {

namespace fs = std::filesystem;
using dark::testing::TempDir;
using nlohmann::json;

// Runs `body` in a forked child; returns its wait status.
template <class Body>
int in_child(Body body) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// Sends `sig` to this process (as kill(1) does) and waits up to a second for the watcher to
// record a signal.
bool send_and_wait(int sig) {
  ::kill(::getpid(), sig);
  for (int i = 0; i < 200 && StopSignals::received() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return StopSignals::received() != 0;
}

TEST(StopSignals, TheFirstSignalIsARequestAndALaterOneEndsTheProcess) {
  const int status = in_child([] {
    ::signal(SIGINT, SIG_DFL);  // a background job of a script starts with SIGINT ignored
    const StopSignals signals;
    if (StopSignals::received() != 0) return 10;
    if (!send_and_wait(SIGTERM) || StopSignals::received() != SIGTERM) return 11;
    ::kill(::getpid(), SIGINT);  // within the second: the same request (a scheduler and a sweep both sent it)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (StopSignals::received() != SIGTERM) return 12;
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    ::kill(::getpid(), SIGINT);  // a second request: the default action
    std::this_thread::sleep_for(std::chrono::milliseconds(2000));
    return 0;
  });
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGINT);
}

// A killed sweep's points get its parent-death signal once per thread of the sweep, spread
// over its teardown: copies that come after the point saved and left the loop must not turn
// its exit code 75 into death by SIGTERM.
TEST(StopSignals, AfterAStopFurtherSignalsAreIgnored) {
  const int status = in_child([] {
    {
      const StopSignals signals;
      if (!send_and_wait(SIGTERM)) return 10;
    }
    ::kill(::getpid(), SIGTERM);
    ::kill(::getpid(), SIGINT);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return 75;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "the child died by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 75);
}

TEST(StopSignals, AnIgnoredSignalStaysIgnoredAndHandlersAreRestored) {
  const int status = in_child([] {
    ::signal(SIGINT, SIG_IGN);
    {
      const StopSignals signals;
      if (send_and_wait(SIGINT)) return 10;
    }
    struct sigaction now {};
    ::sigaction(SIGTERM, nullptr, &now);
    if (now.sa_handler != SIG_DFL) return 11;
    ::sigaction(SIGINT, nullptr, &now);
    if (now.sa_handler != SIG_IGN) return 12;
    sigset_t mask;
    ::pthread_sigmask(SIG_SETMASK, nullptr, &mask);
    if (sigismember(&mask, SIGTERM)) return 13;
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// metrics.jsonl without the timing fields, which differ from run to run: every field of
// every line, not only those metrics::read_metrics keeps.
std::vector<json> metrics_without_timings(const fs::path& run) {
  std::vector<json> out;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line);
    for (const char* key : {"tokens_per_s", "step_ms", "elapsed_s", "peak_mem_mib"}) j.erase(key);
    out.push_back(j);
  }
  return out;
}

TEST(TrainStop, SigtermCheckpointsTheStepAndResumeMatchesTheUninterruptedRun) {
  TempDir tmp;
  const int steps = 80;
  json c = tiny_config(tmp, "stopped", steps);
  c["training"]["checkpoint_interval"] = 25;
  c["training"]["eval_interval"] = 25;
  c["training"]["generate_tokens"] = 0;
  dark::testing::write_text(tmp / "stopped.json", c.dump(2));
  c["output"]["dir"] = tmp / "whole";
  dark::testing::write_text(tmp / "whole.json", c.dump(2));
  const std::vector<std::string> train = {DARKFORMER_EXE, "train", "--config"};
  const auto args = [&](const std::string& name, std::vector<std::string> more = {}) {
    std::vector<std::string> a = train;
    a.push_back(tmp / (name + ".json"));
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };

  const pid_t pid = dark::testing::start_child(args("stopped"), tmp / "stopped.log");
  ASSERT_TRUE(dark::testing::wait_for_steps(tmp / "stopped", 7)) << dark::testing::read_all(tmp / "stopped.log");
  ::kill(pid, SIGTERM);
  const std::optional<int> code = dark::testing::wait_child(pid, std::chrono::seconds(60));
  const std::string log = dark::testing::read_all(tmp / "stopped.log");
  ASSERT_EQ(code, kStoppedBySignal) << log;
  const std::vector<std::int64_t> logged = dark::testing::logged_steps(tmp / "stopped");
  ASSERT_FALSE(logged.empty());
  const std::int64_t at = logged.back();
  ASSERT_LT(at, steps) << "the run ended before the signal; make it longer";
  for (std::size_t i = 0; i < logged.size(); ++i) EXPECT_EQ(logged[i], static_cast<std::int64_t>(i) + 1);
  EXPECT_NE(log.find(str("stopped by signal at step ", at, "; continue with --resume (SIGTERM")), std::string::npos) << log;
  const auto latest = formats::latest_checkpoint(tmp / "stopped");
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->filename(), formats::checkpoint_name(at));
  EXPECT_FALSE(fs::exists(tmp / "stopped/stability.json"));  // not finished

  ASSERT_EQ(dark::testing::run_child(args("stopped", {"--resume"}), tmp / "resumed.log"), 0)
      << dark::testing::read_all(tmp / "resumed.log");
  ASSERT_EQ(dark::testing::run_child(args("whole"), tmp / "whole.log"), 0) << dark::testing::read_all(tmp / "whole.log");
  const std::vector<json> got = metrics_without_timings(tmp / "stopped"), want = metrics_without_timings(tmp / "whole");
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "metrics line " << i + 1;
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const fs::path final_step = fs::path("checkpoints") / formats::checkpoint_name(steps) / file;
    EXPECT_EQ(dark::testing::read_all(tmp / "stopped" / final_step), dark::testing::read_all(tmp / "whole" / final_step))
        << file << " differs from the uninterrupted run's";
  }
}

}  // namespace
}  // namespace dark::train
