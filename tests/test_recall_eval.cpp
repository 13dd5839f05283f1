// The recall tasks on a model: a tiny byte-level model trained on passkey-style text with
// evaluation.passkey and evaluation.copy on writes passkey.json, copy.json and a metrics line
// of the expected structure and numbers; passkey scoring (teacher forcing, then greedy decoding
// where needed: train/passkey_eval.h) gives what nn::generate at temperature 0 gives, on every
// branch; copy scoring equals a naive computation from the full (T, vocab) logits; a sweep's
// summary rows and report carry both tasks' tables, seeds paired.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "data/copy_prompt.h"
#include "data/passkey_prompt.h"
#include "nn/generate.h"
#include "test_util.h"
#include "train/cli/loaded_run.h"
#include "train/copy_eval.h"
#include "train/experiments/report.h"
#include "train/experiments/sweep.h"
#include "train/passkey_eval.h"
#include "train/run_events.h"
#include "train/trainer.h"
#include "train/wilson_interval.h"
#include "train_test_util.h"

namespace dark::train::recall_eval_tests {
namespace {

namespace fs = std::filesystem;
using dark::testing::TempDir;
using nlohmann::json;

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Passkey-style documents: the Landmark prompt with a little filler, then its answer, so that
// the model learns to put digits after "The pass key is" (not to retrieve them: it is tiny).
std::string passkey_corpus(int documents) {
  std::string text;
  for (int i = 0; i < documents; ++i) {
    const std::int32_t key = data::passkey_of(99, 1 + i, 0.5, 0);
    text += data::passkey_text(i % 5, (i % 5) / 2, key) + " " + std::to_string(key) + ".\n";
  }
  return text;
}

// The evaluation section the runs of these tests use.
json evaluation_section() {
  return {{"passkey", {{"lengths", {260, 320}}, {"depths", 2}, {"trials", 2}}},
          {"copy", {{"words", {4, 12}}, {"trials", 1}}}};
}

json run_config(const TempDir& tmp, const std::string& run, int steps) {
  json config = quiet(tiny_config(tmp, run, steps));
  dark::testing::write_text(tmp / "corpus/passkeys.txt", passkey_corpus(400));
  config["model"] = {{"d_model", 48}, {"n_layers", 2}, {"n_heads", 2}, {"d_ff", 96}};
  config["data"]["seq_len"] = 320;  // the passkey prompts' length: positions the model has seen
  config["training"].update({{"batch_size", 4}, {"eval_interval", 100}, {"checkpoint_interval", 0}});
  config["evaluation"] = evaluation_section();
  return config;
}

// One trained run shared by the tests of the suite.
class RecallRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir;
    train(parse_config(run_config(*tmp_, "run", 200)), {});
  }
  static void TearDownTestSuite() { delete tmp_; }
  static fs::path run() { return tmp_->path() / "run"; }

 private:
  static TempDir* tmp_;
};
TempDir* RecallRun::tmp_ = nullptr;

TEST_F(RecallRun, WritesPasskeyAndCopyResultsAndAMetricsLine) {
  const json passkey = read_json(run() / "passkey.json");
  EXPECT_EQ(passkey["task"], "passkey");
  EXPECT_EQ(passkey["depths"], json({0.0, 1.0}));
  ASSERT_EQ(passkey["trials"].size(), 8u);  // 2 lengths x 2 depths x 2 trials
  ASSERT_EQ(passkey["by_length"].size(), 2u);
  ASSERT_EQ(passkey["cells"].size(), 4u);
  int correct = 0;
  for (const json& t : passkey["trials"]) {
    const std::int64_t length = t["length"];
    // One token per byte: within half of the longest filler sentence and its space.
    EXPECT_LE(std::abs(t["tokens"].get<std::int64_t>() - length), 11) << t;
    EXPECT_EQ(t["key"], data::passkey_of(0, length, t["depth"], t["trial"]));
    correct += t["correct"].get<bool>();
  }
  EXPECT_EQ(passkey["overall"]["correct"], correct);
  EXPECT_EQ(passkey["overall"]["trials"], 8);
  const ProportionInterval ci = wilson_interval(correct, 8);
  EXPECT_DOUBLE_EQ(passkey["overall"]["low"].get<double>(), ci.low);
  EXPECT_EQ(passkey["by_length"][1]["length"], 320);
  EXPECT_EQ(passkey["by_length"][0]["trials"].get<int>() + passkey["by_length"][1]["trials"].get<int>(), 8);

  const json copy = read_json(run() / "copy.json");
  ASSERT_EQ(copy["by_list_words"].size(), 2u);
  for (const json& row : copy["by_list_words"]) {
    const std::int64_t n = row["list_words"];
    EXPECT_EQ(row["words"], n);
    // One token per byte: a word's repeat is the list's text and the line between after it.
    std::string between;
    for (const std::string& w : data::copy_words(0, n, 0)) between += " " + w;
    between += "\nThe same list again:";
    EXPECT_EQ(row["distance_min"], static_cast<std::int64_t>(between.size()));
    EXPECT_EQ(row["distance_max"], static_cast<std::int64_t>(between.size()));
    EXPECT_GE(row["token_accuracy"].get<double>(), 0.0);
    EXPECT_GT(row["loss"].get<double>(), 0.0);
  }

  // The last metrics line holds both tasks' summaries at the run's last step, and the event
  // file's scalars come from it.
  std::ifstream metrics(run() / "metrics.jsonl");
  json last;
  for (std::string line; std::getline(metrics, line);) last = json::parse(line);
  EXPECT_EQ(last["step"], 200);
  EXPECT_DOUBLE_EQ(last["passkey"]["accuracy"].get<double>(), passkey["overall"]["accuracy"].get<double>());
  EXPECT_DOUBLE_EQ(last["passkey"]["by_length"]["320"].get<double>(),
                   passkey["by_length"][1]["accuracy"].get<double>());
  EXPECT_DOUBLE_EQ(last["copy"]["word_accuracy"].get<double>(), copy["overall"]["word_accuracy"].get<double>());
  std::vector<std::string> tags;
  for (const auto& [tag, value] : line_scalars(last)) tags.push_back(tag);
  for (const char* tag : {"passkey/accuracy", "passkey/by_length/260", "passkey/by_depth/1", "copy/word_accuracy",
                          "copy/by_words/12/word_accuracy"})
    EXPECT_NE(std::find(tags.begin(), tags.end(), tag), tags.end()) << tag;
}

TEST_F(RecallRun, PasskeyScoringEqualsGreedyGeneration) {
  cli::LoadedRun loaded = cli::load_run(run().string());
  nn::CausalLM& model = *loaded.model;
  const data::Tokenizer& tokenizer = *loaded.tokenizer;
  nn::GenerateOptions greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 10;
  greedy.context = 1 << 20;  // the whole prompt
  greedy.stop_token = tokenizer.eos_id();
  int forced_correct = 0, forced_wrong = 0, decoded = 0, prompts = 0;
  const auto compare = [&](const data::PasskeyPrompt& p, const std::string& what) -> std::vector<std::int32_t> {
    const std::vector<std::int32_t> reference = nn::generate(model, p.ids, greedy);
    const PasskeyVerdict want = judge_passkey_answer(tokenizer.decode(reference), p.key, /*complete=*/true);
    const PasskeyAnswer got = passkey_answer(model, tokenizer, p, 10);
    ++prompts;
    EXPECT_TRUE(got.verdict.decided) << what;
    EXPECT_EQ(got.verdict.correct, want.correct)
        << what << ": '" << got.text << "' vs '" << tokenizer.decode(reference) << "'";
    // Scoring stops once the first number is settled: its digits so far begin greedy's.
    EXPECT_TRUE(want.number.starts_with(got.verdict.number))
        << what << ": " << got.verdict.number << " vs " << want.number;
    EXPECT_TRUE(got.tokens.size() <= reference.size() &&
                std::equal(got.tokens.begin(), got.tokens.end(), reference.begin()))
        << what << ": not greedy's tokens";
    (got.decoded ? decoded : got.verdict.correct ? forced_correct : forced_wrong) += 1;
    return reference;
  };
  for (const std::int64_t length : {256, 320})
    for (const double depth : data::passkey_depths(2))
      for (int trial = 0; trial < 3; ++trial) {
        data::PasskeyPrompt p =
            data::passkey_prompt(tokenizer, false, length, depth, data::passkey_of(5, length, depth, trial));
        const std::string what = str("length ", length, " depth ", depth, " trial ", trial);
        const std::vector<std::int32_t> reference = compare(p, what);
        // The same prompt asking for the number the model does give, when it gives one: a
        // correct answer, found by the teacher-forced rows when their guess is its tokens.
        const PasskeyVerdict given = judge_passkey_answer(tokenizer.decode(reference), 1, true);
        if (!given.number.empty() && given.number.size() <= 5 && given.number[0] != '0' &&
            std::stoi(given.number) >= 1) {
          p.key = std::stoi(given.number);
          p.answer = tokenizer.encode(" " + given.number);
          compare(p, what + " (the model's own number)");
          p.answer.clear();  // no guess: greedy decoding from the first token
          compare(p, what + " (the model's own number, no guess)");
        }
        p.answer = std::vector<std::int32_t>(reference.begin(), reference.end());  // the guess is right throughout
        compare(p, what + " (greedy's tokens as the guess)");
      }
  std::printf("%d prompts: %d correct and %d wrong from the teacher-forced rows, %d decoded further\n", prompts,
              forced_correct, forced_wrong, decoded);
  // Every way to an answer was taken.
  EXPECT_GT(forced_correct, 0) << prompts << " prompts";
  EXPECT_GT(forced_wrong, 0);
  EXPECT_GT(decoded, 0);
}

TEST_F(RecallRun, CopyScoringEqualsTheFullLogits) {
  cli::LoadedRun loaded = cli::load_run(run().string());
  nn::CausalLM& model = *loaded.model;
  // 60 words: more repeat rows than one chunk of head logits (256).
  const data::CopyPrompt p = data::copy_prompt(*loaded.tokenizer, false, data::copy_words(3, 60, 0));
  const CopyScore score = score_copy(model, p);
  const auto T = static_cast<std::int64_t>(p.ids.size());
  const std::int64_t V = model.config().vocab_size;
  const std::vector<double> logits =
      dark::testing::values(model.forward(Tensor::from_vector(p.ids, {1, T})));  // (1, T, V): small here
  std::size_t at = 0;
  int copied = 0, correct = 0;
  for (std::size_t w = 0; w < p.spans.size(); ++w) {
    bool all = true;
    for (std::int64_t pos = p.spans[w].repeat_begin; pos < p.spans[w].repeat_end; ++pos, ++at) {
      const double* row = logits.data() + (pos - 1) * V;
      const double top = *std::max_element(row, row + V);
      double z = 0;
      for (std::int64_t v = 0; v < V; ++v) z += std::exp(row[v] - top);
      const std::int32_t target = p.ids[static_cast<std::size_t>(pos)];
      const bool is_best = std::max_element(row, row + V) - row == target;
      ASSERT_LT(at, score.tokens.size());
      EXPECT_NEAR(score.tokens[at].loss, top + std::log(z) - row[target], 1e-4) << "token " << pos;
      EXPECT_EQ(score.tokens[at].correct, is_best) << "token " << pos;
      EXPECT_EQ(score.tokens[at].distance, p.spans[w].repeat_begin - p.spans[w].first_begin);
      all = all && is_best;
      correct += is_best;
    }
    EXPECT_EQ(score.words_copied[w], all) << "word " << w;
    copied += all;
  }
  EXPECT_EQ(at, score.tokens.size());
  EXPECT_GT(at, 256u);
  EXPECT_GT(correct, 0) << "the trained model should get some letters of the words";
  std::printf("copy of 60 words by the tiny model: %d of %zu tokens, %d words\n", correct, at, copied);
}

TEST(RecallRunChecks, APasskeyLengthTooShortForTheTokenizerFailsAtTheStart) {
  TempDir tmp;
  json config = quiet(tiny_config(tmp, "run", 6));
  config["evaluation"] = {{"passkey", {{"lengths", {100, 400}}, {"trials", 1}}}};
  dark::testing::expect_error([&] { train(parse_config(config), {}); },
                              {"config: evaluation.passkey.lengths: passkey: a prompt of 100 tokens is too short"});
  EXPECT_FALSE(fs::exists(tmp.path() / "run/checkpoints")) << "it failed before training";
  // Off (the default): no file, no line.
  config.erase("evaluation");
  train(parse_config(config), {});
  EXPECT_FALSE(fs::exists(tmp.path() / "run/passkey.json"));
  EXPECT_EQ(read_text(tmp.path() / "run/metrics.jsonl").find("passkey"), std::string::npos);
}

TEST(RecallSweep, SummaryRowsAndReportTablesPairSeeds) {
  TempDir tmp;
  json base = run_config(tmp, "unused", 10);
  base.erase("output");
  base["evaluation"] = {{"passkey", {{"lengths", {300}}, {"depths", 1}, {"trials", 2}}},
                        {"copy", {{"words", {4}}, {"trials", 1}}}};
  dark::testing::write_text(tmp / "base.json", base.dump(2));
  const json sweep = {{"base", "base.json"},
                      {"axes", {{"attention.kind", {"softmax", "performer"}}}},
                      {"seeds", {1, 2}},
                      {"output", tmp / "out"}};
  dark::testing::write_text(tmp / "sweep.json", sweep.dump(2));
  experiments::SweepOptions options;
  options.jobs = 2;
  options.executable = DARKFORMER_EXE;
  const json summary = experiments::run_sweep(experiments::plan_sweep(tmp.path() / "sweep.json"), options);
  ASSERT_EQ(summary["points"].size(), 4u);
  std::map<std::string, std::pair<int, int>> pooled;  // method -> (correct, trials) at length 300
  for (const json& row : summary["points"]) {
    ASSERT_EQ(row["status"], "done") << row;
    const json passkey = read_json(fs::path(row["dir"].get<std::string>()) / "passkey.json");
    EXPECT_EQ(row["passkey"]["accuracy"], passkey["overall"]["accuracy"]);
    EXPECT_EQ(row["passkey"]["by_length"]["300"], passkey["by_length"][0]["accuracy"]);
    EXPECT_TRUE(row["copy"]["by_words"]["4"].is_number()) << row;
    auto& [k, n] = pooled[row["values"]["attention.kind"].get<std::string>()];
    k += passkey["by_length"][0]["correct"].get<int>(), n += passkey["by_length"][0]["trials"].get<int>();
  }
  // The softmax points' accuracies at length 300 made 0.5 and 1 (the performer points' stay 0,
  // as the tiny models score): a paired difference of 0.75 +- t(0.975, 1) 0.25 = 12.706 x 0.25.
  for (const auto& [name, accuracy] : {std::pair{"softmax_seed1", 0.5}, std::pair{"softmax_seed2", 1.0}}) {
    const fs::path file = tmp.path() / "out" / name / "passkey.json";
    json passkey = read_json(file);
    ASSERT_EQ(passkey["by_length"][0]["accuracy"], 0.0) << "the tiny model found a key: pick other numbers";
    passkey["by_length"][0]["accuracy"] = accuracy;
    passkey["by_length"][0]["correct"] = static_cast<int>(accuracy * 2);
    dark::testing::write_text(file.string(), passkey.dump());
    pooled["softmax"].first += static_cast<int>(accuracy * 2);
  }
  const std::string md = read_text(experiments::write_report(tmp.path() / "out").markdown);
  EXPECT_NE(md.find("## Passkey retrieval"), std::string::npos) << md;
  EXPECT_NE(md.find("| kind \\ length | 300 | all |"), std::string::npos) << md;
  for (const auto& [kind, counts] : pooled)
    EXPECT_NE(md.find(str("| ", kind, " | ", counts.first, "/", counts.second, " = ")), std::string::npos)
        << kind << "\n"
        << md;
  EXPECT_NE(md.find("| softmax | 3/4 = 0.75 [0.30, 0.95] (0.75 ± 0.35) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| all | length 300 | softmax − performer | +0.750 | [-2.427, +3.927] | 2 | not distinguishable |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("## Copy task"), std::string::npos) << md;
  EXPECT_NE(md.find("| kind \\ list | 4 words ("), std::string::npos) << md;
  // Neither kind's tiny models copy a word: the same for every seed, left out of the pairs.
  EXPECT_NE(md.find("Paired by seed: 1 comparison(s) where both methods gave the same value for every seed are left "
                    "out."),
            std::string::npos)
      << md;
}

}  // namespace
}  // namespace dark::train::recall_eval_tests
