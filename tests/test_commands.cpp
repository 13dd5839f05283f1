// The command-line layer: one argument parser for every subcommand (demo-mlp included), its
// range checks, and the shared progress text (durations, progress bars).
#include <gtest/gtest.h>

#include "core/error.h"
#include "test_util.h"
#include "train/cli/args.h"
#include "train/cli/commands.h"
#include "train/progress.h"

namespace dark::train {
namespace {

using dark::testing::error_of;

TEST(Commands, DemoMlpHelpAndFlagsGoThroughTheSharedParser) {
  EXPECT_EQ(cli::demo_mlp_command({"--help"}), 0);
  EXPECT_EQ(cli::demo_mlp_command({"-h"}), 0);
  EXPECT_EQ(error_of([] { cli::demo_mlp_command({"--steps"}); }), "--steps needs a value (N)");
  EXPECT_EQ(error_of([] { cli::demo_mlp_command({"--stpes", "3"}); }), "unknown argument '--stpes'");
  EXPECT_EQ(error_of([] { cli::demo_mlp_command({"--steps", "0"}); }),
            "--steps: 0 is out of range: expected an integer in [1, 2147483647]");
  EXPECT_EQ(error_of([] { cli::demo_mlp_command({"--steps", "1e3"}); }), "--steps: '1e3' is not an integer");
  EXPECT_EQ(error_of([] { cli::demo_mlp_command({"--steps", "99999999999999999999"}); }),
            "--steps: 99999999999999999999 is out of range: expected an integer in [1, 2147483647]");
  EXPECT_EQ(error_of([] { cli::demo_mlp_command({"--lr", "nan"}); }), "--lr: 'nan' is not a finite number");
  EXPECT_EQ(error_of([] { cli::demo_mlp_command({"--lr", "-1"}); }), "--lr: expected a number > 0, got -1");
  EXPECT_EQ(error_of([] { cli::demo_mlp_command({"--seed", "-2"}); }),
            "--seed: -2 is out of range: expected an integer >= 0");
  EXPECT_EQ(cli::demo_mlp_command({"--steps", "5", "--batch-size=8", "--seed", "3"}), 0);
}

TEST(Commands, IntegerRangesAreCheckedNotCut) {
  const std::vector<cli::FlagSpec> specs = {{"--n", "N", "7", ""}};
  EXPECT_EQ(cli::Args({}, specs).integer("--n", 0, 10), 7);
  EXPECT_EQ(cli::Args({"--n", "-5"}, specs).integer("--n"), -5);
  EXPECT_EQ(error_of([&] { cli::Args({"--n", "11"}, specs).integer("--n", 0, 10); }),
            "--n: 11 is out of range: expected an integer in [0, 10]");
  EXPECT_EQ(error_of([&] { cli::Args({"--n", "-1"}, specs).integer("--n", 0); }),
            "--n: -1 is out of range: expected an integer >= 0");
  EXPECT_EQ(error_of([&] { cli::Args({"--n", "9223372036854775808"}, specs).integer("--n"); }),
            "--n: 9223372036854775808 is out of range: expected an integer <= 9223372036854775807");
  EXPECT_EQ(error_of([&] { cli::Args({"--n", "1e999"}, specs).number("--n"); }), "--n: '1e999' is not a finite number");
  EXPECT_DOUBLE_EQ(cli::Args({"--n", "2.5e-3"}, specs).number("--n"), 2.5e-3);
}

TEST(Progress, DurationsAndBars) {
  EXPECT_EQ(duration_text(0), "0s");
  EXPECT_EQ(duration_text(44.6), "45s");
  EXPECT_EQ(duration_text(187), "3m07s");
  EXPECT_EQ(duration_text(3599.4), "59m59s");
  EXPECT_EQ(duration_text(7530), "2h05m");
  EXPECT_EQ(duration_text(-3), "0s");
  EXPECT_EQ(progress_bar(0, 10, 4), "[....]");
  EXPECT_EQ(progress_bar(5, 10, 4), "[##..]");
  EXPECT_EQ(progress_bar(10, 10, 4), "[####]");
  EXPECT_EQ(progress_bar(20, 10, 4), "[####]");
  EXPECT_EQ(progress_bar(3, 0, 4), "[####]");
}

// Work that ends within the first 5 s says nothing; longer work logs once 5 s have passed,
// then every 15 s, and once at the end.
TEST(Progress, LogsOnlyWorkThatTakesAWhile) {
  double now = 0;
  const ProgressLog::Clock clock = [&] { return now; };
  ProgressLog quick("evaluation", "batch", "batches", 4, 5, 15, clock);
  for (int b = 1; b <= 4; ++b) {
    now += 1;
    EXPECT_EQ(quick.update(b), "") << b;
  }
  now = 0;
  ProgressLog slow("evaluation", "batch", "batches", 20, 5, 15, clock);
  std::vector<std::string> lines;
  for (int b = 1; b <= 20; ++b) {
    now += 2;  // 2 s a batch: lines after batches 3 (6 s), 11 (22 s) and 19 (38 s), and at the end
    if (std::string line = slow.update(b); !line.empty()) lines.push_back(line);
  }
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "evaluation: batch 3/20 [###.................] | 2.00 s/batch | ETA 34s");
  EXPECT_EQ(lines[1].substr(0, 20), "evaluation: batch 11");
  EXPECT_EQ(lines[3], "evaluation: batch 20/20 [####################] | 2.00 s/batch | done in 40s");
  now = 0;
  ProgressLog tokens("generate", "token", "tokens", 100, 0, 15, clock);
  now = 0.5;
  EXPECT_EQ(tokens.update(10), "generate: token 10/100 [##..................] | 20.0 tokens/s | ETA 5s");
}

}  // namespace
}  // namespace dark::train
