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

}  // namespace
}  // namespace dark::train
