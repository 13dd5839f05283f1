// One writer per run folder (train/run_lock.h):
//  - a second holder fails naming the first's pid and host; the lock file says who holds it
//    and is emptied on release;
//  - a second `darkformer train` (fresh or --resume) on a folder being trained fails at once
//    with that message and touches nothing: the first run ends normally with every metrics
//    line once and its config.json unchanged;
//  - the lock of a trainer killed with SIGKILL is taken over by the next one, with a log line
//    naming the dead process; the resumed run then finishes.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include "child_process.h"
#include "train/run_lock.h"
#include "train_test_util.h"

namespace dark::train {
namespace {

namespace fs = std::filesystem;
using dark::testing::TempDir;
using nlohmann::json;

std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

TEST(RunLock, ASecondHolderFailsNamingTheFirst) {
  TempDir tmp;
  const fs::path dir = tmp / "run";
  const std::string owner = str(::getpid(), " ", host_name());
  {
    const RunLock held(dir);
    EXPECT_EQ(held.taken_over_from(), "");
    EXPECT_EQ(dark::testing::read_all(lock_file(dir)), owner + "\n");
    // flock belongs to an open file: a second open in the same process conflicts too.
    dark::testing::expect_error([&] { RunLock second(dir); },
                                {"run folder ", dir.string(), " is in use by process ", std::to_string(::getpid()),
                                 " on host ", host_name()});
    dark::testing::expect_error([&] { RunLock second(dir, "sweep folder"); }, {"sweep folder ", " is in use by process "});
    EXPECT_EQ(dark::testing::read_all(lock_file(dir)), owner + "\n");  // the failed attempts changed nothing
  }
  EXPECT_EQ(dark::testing::read_all(lock_file(dir)), "");  // released cleanly
  const RunLock again(dir);
  EXPECT_EQ(again.taken_over_from(), "");
}

// A tiny run long enough to be caught running, as tmp/<name>.json.
fs::path long_run(const TempDir& tmp, const std::string& name, int steps, int checkpoint_interval) {
  json c = tiny_config(tmp, name, steps);
  c["training"]["generate_tokens"] = 0;
  c["training"]["eval_interval"] = 1000;
  c["training"]["checkpoint_interval"] = checkpoint_interval;
  const fs::path path = tmp / (name + ".json");
  dark::testing::write_text(path, c.dump(2));
  return path;
}

TEST(RunLock, ASecondTrainerFailsAtOnceAndTouchesNothing) {
  TempDir tmp;
  // A tiny step takes about a millisecond: 250 steps once ended before the two refused
  // trainers had started, on a CI machine busy with other tests; 4000 leave seconds to spare.
  const int steps = 4000;
  const fs::path config = long_run(tmp, "run", steps, 1000);
  const pid_t first = dark::testing::start_child({DARKFORMER_EXE, "train", "--config", config}, tmp / "first.log");
  ASSERT_TRUE(dark::testing::wait_for_steps(tmp / "run", 12)) << dark::testing::read_all(tmp / "first.log");
  const auto config_time = fs::last_write_time(tmp / "run/config.json");
  for (const std::vector<std::string>& extra : {std::vector<std::string>{}, std::vector<std::string>{"--resume"}}) {
    std::vector<std::string> argv = {DARKFORMER_EXE, "train", "--config", config};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const fs::path log = tmp / (extra.empty() ? "second.log" : "second_resume.log");
    ASSERT_EQ(dark::testing::run_child(argv, log), 1) << dark::testing::read_all(log);
    const std::string text = dark::testing::read_all(log);
    EXPECT_NE(text.find(str("run folder ", (tmp / "run"), " is in use by process ", first, " on host ", host_name())),
              std::string::npos)
        << text;
  }
  ASSERT_LT(dark::testing::logged_steps(tmp / "run").size(), static_cast<std::size_t>(steps))
      << "the first run ended before the second writers came; make it longer";
  ASSERT_EQ(dark::testing::wait_child(first, std::chrono::seconds(180)), 0) << dark::testing::read_all(tmp / "first.log");
  std::vector<std::int64_t> want(steps);
  for (int i = 0; i < steps; ++i) want[i] = i + 1;
  EXPECT_EQ(dark::testing::logged_steps(tmp / "run"), want);  // nothing cut, nothing written twice
  EXPECT_EQ(fs::last_write_time(tmp / "run/config.json"), config_time);
  EXPECT_EQ(dark::testing::read_all(lock_file(tmp / "run")), "");
}

TEST(RunLock, TheLockOfAKilledTrainerIsTakenOver) {
  TempDir tmp;
  const int steps = 100;
  const fs::path config = long_run(tmp, "run", steps, 10);
  const pid_t killed = dark::testing::start_child({DARKFORMER_EXE, "train", "--config", config}, tmp / "killed.log");
  ASSERT_TRUE(dark::testing::wait_for_steps(tmp / "run", 12)) << dark::testing::read_all(tmp / "killed.log");
  ::kill(killed, SIGKILL);
  ASSERT_EQ(dark::testing::wait_child(killed, std::chrono::seconds(30)), 128 + SIGKILL);
  EXPECT_EQ(dark::testing::read_all(lock_file(tmp / "run")), str(killed, " ", host_name(), "\n"));

  ASSERT_EQ(dark::testing::run_child({DARKFORMER_EXE, "train", "--config", config, "--resume"}, tmp / "resumed.log"), 0)
      << dark::testing::read_all(tmp / "resumed.log");
  const std::string log = dark::testing::read_all(tmp / "resumed.log");
  EXPECT_NE(log.find(str("run folder ", (tmp / "run"), ": taking over the lock left by process ", killed, " on host ",
                         host_name(), ", which has ended")),
            std::string::npos)
      << log;
  EXPECT_EQ(dark::testing::logged_steps(tmp / "run").size(), static_cast<std::size_t>(steps));
}

}  // namespace
}  // namespace dark::train
