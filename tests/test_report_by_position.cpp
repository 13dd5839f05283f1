// `darkformer report`'s loss by distance (train/experiments/report.cpp, report_plots.cpp) on a
// sweep folder written by hand: two methods x three seeds whose final evaluations carry
// hand-chosen losses by position bucket and exact-window ablations. The tables' cells are the
// mean ± sd over seeds of those numbers, the paired comparisons their differences by seed
// with a Student t interval, and the plot's data the means by bucket.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "tests/test_util.h"
#include "train/experiments/report.h"

namespace dark::report_by_position_test {
namespace {

using nlohmann::json;
using testing::TempDir;
namespace fs = std::filesystem;

// The final evaluation of (method, seed): buckets 1-64 and 65-256, and for performer both
// ablations (window_only 1 nat above its loss, features_only 0.25).
json final_eval(const std::string& method, int seed) {
  const bool performer = method == "performer";
  const double near = performer ? 2.0 + seed : 2.0 + 1.1 * seed;  // performer: 3, 4, 5; lfk: 3.1, 4.2, 5.3
  const double far = performer ? 3.0 + 0.5 * seed : 3.2 + 0.5 * seed;
  const double loss = (performer ? 3.5 : 3.75) + 0.25 * seed;  // dyadic: the ablations' differences are exact
  json line = {{"step", 10},
               {"eval_loss", loss},
               {"eval_perplexity", std::exp(loss)},
               {"eval_accuracy", 0.25},
               {"eval_tokens", 320},
               {"eval_by_position",
                {{"1-64", {{"loss", near}, {"accuracy", 0.25}, {"tokens", 256}}},
                 {"65-256", {{"loss", far}, {"accuracy", 0.5}, {"tokens", 64}}}}}};
  if (performer)
    for (const auto& [name, extra] : {std::pair{"window_only", 1.0}, std::pair{"features_only", 0.25}})
      line["eval_ablation"][name] = {{"loss", loss + extra},
                                     {"perplexity", std::exp(loss + extra)},
                                     {"accuracy", 0.2},
                                     {"tokens", 320},
                                     {"by_position",
                                      {{"1-64", {{"loss", near + extra / 2}, {"accuracy", 0.2}, {"tokens", 256}}},
                                       {"65-256", {{"loss", far + extra * 3}, {"accuracy", 0.4}, {"tokens", 64}}}}}};
  return line;
}

// SWEEP/summary.json and each point's config and metrics.jsonl (ten steps, then the evaluation).
void write_sweep(const fs::path& sweep) {
  json points = json::array();
  for (const std::string method : {"performer", "lfk"})
    for (int seed = 1; seed <= 3; ++seed) {
      const std::string name = str(method, "_seed", seed);
      const fs::path dir = sweep / name;
      const json config = {{"attention", {{"kind", method}, {"exact_window", 8}}}, {"evaluation", {{"ablation", true}}}};
      testing::write_text((dir / "point_config.json").string(), config.dump());
      std::string metrics;
      for (int step = 1; step <= 10; ++step)
        metrics += json({{"step", step}, {"loss", 6.0 - 0.1 * step}, {"grad_norm", 1.0}, {"lr", 1e-3}}).dump() + "\n";
      metrics += final_eval(method, seed).dump() + "\n";
      testing::write_text((dir / "metrics.jsonl").string(), metrics);
      points.push_back({{"name", name},
                        {"dir", dir.string()},
                        {"values", {{"attention.kind", method}, {"seed", seed}}},
                        {"status", "done"},
                        {"wall_s", 1.0}});
    }
  testing::write_text((sweep / "summary.json").string(),
                      json({{"sweep_file", "hand.json"}, {"axes", {"attention.kind", "seed"}}, {"points", points}}).dump());
}

// The table under **title** (to the blank line after its rule).
std::string table(const std::string& md, const std::string& title) {
  const std::size_t at = md.find("**" + title + "**");
  if (at == std::string::npos) return "";
  return md.substr(at, md.find("\n\n", md.find("|---", at)) - at);
}

TEST(ReportByPosition, MethodByBucketTablesAblationsAndPairsBySeed) {
  TempDir tmp;
  const fs::path sweep = tmp.path() / "sweep";
  write_sweep(sweep);
  const std::string md = read_file(experiments::write_report(sweep).markdown);
  EXPECT_NE(md.find("## Loss by distance (mean ± sd over 3 seeds)"), std::string::npos) << md;
  const std::string loss = table(md, "Validation loss by context length");
  EXPECT_NE(loss.find("| kind \\ context | 1-64 | 65-256 |"), std::string::npos) << loss;
  EXPECT_NE(loss.find("| performer | 4 ± 1 | 4 ± 0.5 |"), std::string::npos) << loss;
  EXPECT_NE(loss.find("| lfk | 4.2 ± 1.1 | 4.2 ± 0.5 |"), std::string::npos) << loss;
  EXPECT_EQ(loss.find("257-1K"), std::string::npos) << "no point reached it:\n" << loss;
  EXPECT_NE(table(md, "Next-token accuracy by context length").find("| performer | 0.25 | 0.5 |"), std::string::npos) << md;
  // The ablations beside the loss: lfk's runs measured none.
  EXPECT_NE(md.find("### What each part of the exact window carries"), std::string::npos) << md;
  EXPECT_NE(table(md, "Loss change without the far field (window_only − model)").find("| performer | 1 |"), std::string::npos)
      << md;
  EXPECT_NE(table(md, "Loss change without the far field (window_only − model)").find("| lfk | – |"), std::string::npos) << md;
  EXPECT_NE(table(md, "Loss change without the window (features_only − model)").find("| performer | 0.25 |"), std::string::npos)
      << md;
  EXPECT_NE(table(md, "Validation loss by context length, window_only").find("| performer | 4.5 ± 1 | 7 ± 0.5 |"),
            std::string::npos)
      << md;
  // Paired by seed: performer − lfk at 1-64 is -0.1, -0.2, -0.3 (mean -0.2, sd 0.1; t 4.303 for
  // 2 degrees of freedom: -0.2 ± 0.248).
  EXPECT_NE(md.find("| all | val loss 1-64 | performer − lfk | -0.2 | [-0.448, +0.0484] | 3 | not distinguishable |"),
            std::string::npos)
      << md;
  // The plot's data: each method's mean by bucket index, the ablations in files of their own.
  EXPECT_TRUE(fs::exists(sweep / "plots/loss_by_position.gp"));
  EXPECT_EQ(read_file(sweep / "plots/by_position_all_performer.dat"), "0 4\n1 4\n");
  EXPECT_EQ(read_file(sweep / "plots/by_position_all_performer_window_only.dat"), "0 4.5\n1 7\n");
  EXPECT_FALSE(fs::exists(sweep / "plots/by_position_all_lfk_window_only.dat"));
  const std::string gp = read_file(sweep / "plots/loss_by_position.gp");
  EXPECT_NE(gp.find("set xtics ('1-64' 0, '65-256' 1, '257-1K' 2, '1K-4K' 3, '4K+' 4)"), std::string::npos) << gp;
  EXPECT_NE(gp.find("'by_position_all_performer_features_only.dat' using 1:2 with linespoints lw 2 pt 7 dt 3"),
            std::string::npos)
      << gp;
}

TEST(ReportByPosition, RunsWithoutBucketsHaveNoSection) {
  TempDir tmp;
  const fs::path sweep = tmp.path() / "sweep";
  write_sweep(sweep);
  // Metrics from before the buckets: the evaluation line without them.
  for (const fs::directory_entry& e : fs::directory_iterator(sweep)) {
    if (!e.is_directory()) continue;
    std::string text = read_file(e.path() / "metrics.jsonl");
    const std::size_t last = text.rfind("{\"eval_");
    json line = json::parse(text.substr(last));
    line.erase("eval_by_position");
    line.erase("eval_ablation");
    testing::write_text((e.path() / "metrics.jsonl").string(), text.substr(0, last) + line.dump() + "\n");
  }
  const std::string md = read_file(experiments::write_report(sweep).markdown);
  EXPECT_EQ(md.find("## Loss by distance"), std::string::npos) << md;
  EXPECT_FALSE(fs::exists(sweep / "plots/loss_by_position.gp"));
}

}  // namespace
}  // namespace dark::report_by_position_test
