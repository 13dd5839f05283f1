// Data parallelism end to end: `darkformer train` under `mpirun -np 2` against one process.
//  - 2 ranks with grad_accum 1 = 1 process with grad_accum 2, bit for bit: the same loss and
//    gradient norm at every step, the same final weights and optimizer state (DARKFormer with
//    whiten calibration, feature redraws and dropout, so features, calibration and dropout
//    keys are all exercised). Both sides run one thread per process: a GEMM may sum in
//    another order with more threads.
//  - ZeRO stage 1 = stage 0 (losses, weights, the whole optimizer state in the checkpoint).
//  - A rank killed with SIGKILL ends the job; the last checkpoint loads, and --resume (on one
//    process with twice the grad_accum: checkpoints do not depend on the number of ranks)
//    reaches the final loss and weights of an uninterrupted 2-rank run; resuming with another
//    global batch warns. A rank that stops answering (SIGSTOP) ends the
//    job within distributed.timeout_s, with an error naming the rank and the collective.
//  - Ranks that build different models (other seeds) stop with an error naming the tensor.
// mpirun comes from scripts/install-deps.sh; when it is missing these tests fail, never skip.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "train/formats/checkpoint.h"
#include "train_test_util.h"


namespace dark::train {
namespace {

namespace fs = std::filesystem;
using dark::testing::read_all;
using dark::testing::TempDir;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Runs a command to completion (at most 3 minutes); returns its exit code and shows its log on failure.
int run(const std::vector<std::string>& argv, const fs::path& log) {
  const std::optional<int> code = dark::testing::wait_child(dark::testing::start_child(argv, log), std::chrono::seconds(180));
  EXPECT_TRUE(code.has_value()) << argv[0] << " did not finish in 3 minutes; log:\n" << read_all(log);
  return code.value_or(-1);
}

// `mpirun -np N darkformer ...` (every rank gets the same arguments).
std::vector<std::string> mpirun(int ranks, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {DARK_MPIEXEC, "-np", std::to_string(ranks), "--oversubscribe",
                                   "--allow-run-as-root", "--bind-to", "none", "-x", "OMP_NUM_THREADS",
                                   DARKFORMER_EXE};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

void require_mpirun() {
  ASSERT_TRUE(std::string(DARK_MPIEXEC).size() > 0 && fs::exists(DARK_MPIEXEC))
      << "mpirun not found (" << DARK_MPIEXEC << "): install Open MPI with scripts/install-deps.sh";
}

fs::path write_config(const TempDir& tmp, const std::string& name, const json& config) {
  const fs::path path = tmp / (name + ".json");
  std::ofstream(path) << config.dump(2);
  return path;
}

// Trains `config` as tmp/<name>.json, logging to tmp/<name>.log: as a plain process when
// ranks is 0, else under `mpirun -np ranks`. Fails the test (with the log) unless it succeeds.
void train(const TempDir& tmp, const std::string& name, const json& config, int ranks) {
  const std::vector<std::string> args = {"train", "--config", write_config(tmp, name, config)};
  std::vector<std::string> argv = {DARKFORMER_EXE};
  argv.insert(argv.end(), args.begin(), args.end());
  const fs::path log = tmp / (name + ".log");
  ASSERT_EQ(run(ranks == 0 ? argv : mpirun(ranks, args), log), 0) << read_all(log);
}

// The eval_loss of every evaluation line, in order.
std::vector<double> eval_losses(const fs::path& run) {
  std::vector<double> out;
  for (const metrics::EvalRecord& e : metrics::read_metrics(run / "metrics.jsonl").evals) out.push_back(e.loss);
  return out;
}

// The tiny run with everything that must agree across ranks switched on.
json parallel_config(const TempDir& tmp, const std::string& run, int steps) {
  json c = tiny_config(tmp, run, steps);
  c.merge_patch(json::parse(R"({
    "model": {"dropout": 0.1},
    "attention": {"kind": "darkformer", "num_features": 16, "redraw_interval": 3,
                  "darkformer": {"init": "whiten"}, "calibration_batches": 2},
    "distributed": {"bucket_mb": 0.01}
  })"));
  return c;
}

// Every step line's (loss, grad_norm) pair, by step.
std::map<std::int64_t, std::pair<double, double>> step_lines(const fs::path& run) {
  std::map<std::int64_t, std::pair<double, double>> out;
  for (const metrics::StepRecord& s : metrics::read_metrics(run / "metrics.jsonl").steps)
    out[s.step] = {s.loss, s.grad_norm};
  return out;
}

// Exact equality of two tensor maps (same names, shapes, dtypes and bytes).
void expect_identical(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b,
                      const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.contains(name)) << what << ": " << name;
    const Tensor& u = b.at(name);
    ASSERT_EQ(t.shape(), u.shape()) << what << ": " << name;
    ASSERT_EQ(t.dtype(), u.dtype()) << what << ": " << name;
    EXPECT_EQ(std::memcmp(t.contiguous().raw_data(), u.contiguous().raw_data(),
                          static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype())),
              0)
        << what << ": " << name << " differs";
  }
}

void expect_same_runs(const fs::path& a, const fs::path& b) {
  const auto la = step_lines(a), lb = step_lines(b);
  ASSERT_FALSE(la.empty());
  ASSERT_EQ(la.size(), lb.size());
  for (const auto& [step, v] : la) {
    EXPECT_EQ(v.first, lb.at(step).first) << "loss at step " << step;
    EXPECT_EQ(v.second, lb.at(step).second) << "gradient norm at step " << step;
  }
  const formats::CheckpointData ca = formats::load_checkpoint(*formats::latest_checkpoint(a)), cb = formats::load_checkpoint(*formats::latest_checkpoint(b));
  EXPECT_EQ(ca.step, cb.step);
  expect_identical(ca.model, cb.model, "weights");
  expect_identical(ca.optimizer, cb.optimizer, "optimizer state");
  expect_identical(ca.attention, cb.attention, "attention state");
}

std::size_t count(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(DataParallel, TwoRanksEqualOneProcessWithTwiceTheGradAccum) {
  require_mpirun();
  TempDir tmp;
  json one = parallel_config(tmp, "one", 12);
  one["training"]["grad_accum"] = 2;
  one["data"]["seq_len"] = 80;  // evaluations over two position buckets
  ASSERT_NO_FATAL_FAILURE(train(tmp, "one", one, 0));
  json two = parallel_config(tmp, "two", 12);
  two["data"]["seq_len"] = 80;
  ASSERT_NO_FATAL_FAILURE(train(tmp, "two", two, 2));
  expect_same_runs(tmp / "one", tmp / "two");

  const std::string log = read_all(tmp / "two.log");
  EXPECT_NE(log.find("data parallel: 2 rank(s), backend mpi"), std::string::npos) << log;
  EXPECT_NE(log.find("global batch 16"), std::string::npos) << log;
  EXPECT_EQ(count(log, "step 12/12"), 1u) << "only rank 0 prints the step line:\n" << log;
  EXPECT_EQ(count(log, "[rank 1] [info]"), 0u) << log;
  // Evaluation is shared between the ranks: the same metrics over the same windows.
  const std::vector<double> eval_a = eval_losses(tmp / "one"), eval_b = eval_losses(tmp / "two");
  ASSERT_EQ(eval_a.size(), eval_b.size());
  // The sums are added in another order (per rank, then across ranks): float64 rounding only.
  for (std::size_t i = 0; i < eval_a.size(); ++i) EXPECT_NEAR(eval_a[i], eval_b[i], 1e-12 * eval_a[i]);
  // ... and by position: the ranks' per-position sums added (train/evaluate.h).
  const auto evals_a = metrics::read_metrics(tmp.path() / "one/metrics.jsonl").evals;
  const auto evals_b = metrics::read_metrics(tmp.path() / "two/metrics.jsonl").evals;
  for (std::size_t i = 0; i < evals_a.size(); ++i) {
    ASSERT_EQ(evals_a[i].by_position.size(), 2u);  // 1-64 and 65-256
    ASSERT_EQ(evals_b[i].by_position.size(), 2u);
    for (std::size_t j = 0; j < 2; ++j) {
      EXPECT_EQ(evals_a[i].by_position[j].tokens, evals_b[i].by_position[j].tokens);
      EXPECT_NEAR(evals_a[i].by_position[j].loss, evals_b[i].by_position[j].loss, 1e-12 * evals_a[i].by_position[j].loss);
      EXPECT_EQ(evals_a[i].by_position[j].accuracy, evals_b[i].by_position[j].accuracy);
    }
  }
}

TEST(DataParallel, OneRankUnderMpirunEqualsAPlainProcess) {
  require_mpirun();
  TempDir tmp;
  const json plain = parallel_config(tmp, "plain", 6);
  ASSERT_NO_FATAL_FAILURE(train(tmp, "plain", plain, 0));
  const json launched = parallel_config(tmp, "launched", 6);
  ASSERT_NO_FATAL_FAILURE(train(tmp, "launched", launched, 1));
  expect_same_runs(tmp / "plain", tmp / "launched");
  EXPECT_NE(read_all(tmp / "plain.log").find("data parallel: 1 rank(s), backend single"), std::string::npos);
  EXPECT_NE(read_all(tmp / "launched.log").find("data parallel: 1 rank(s), backend mpi"), std::string::npos);
}

TEST(DataParallel, ResumingWithAnotherGlobalBatchWarns) {
  require_mpirun();
  TempDir tmp;
  ASSERT_NO_FATAL_FAILURE(train(tmp, "run", parallel_config(tmp, "run", 6), 2));
  const fs::path config = tmp / "run.json";
  ASSERT_EQ(run({DARKFORMER_EXE, "train", "--config", config, "--resume", "--set", "training.steps=8"},
                tmp / "second.log"),
            0)
      << read_all(tmp / "second.log");
  EXPECT_NE(read_all(tmp / "second.log")
                .find("the global batch changes from 16 sequences (2 rank(s) x batch_size 8 x grad_accum 1) to 8"),
            std::string::npos)
      << read_all(tmp / "second.log");
}

// Limited-attention finetuning: the frozen parameters are not in the gradient buffer, and
// the run on 2 ranks still equals one process with twice the grad_accum.
TEST(DataParallel, FinetuningWithFrozenParametersOnTwoRanks) {
  require_mpirun();
  TempDir tmp;
  json source = parallel_config(tmp, "source", 5);
  ASSERT_NO_FATAL_FAILURE(train(tmp, "source", source, 0));
  json tune = parallel_config(tmp, "one", 6);
  tune["finetune"] = {{"init_from", tmp / "source"}, {"trainable", {"limited_attention"}}};
  tune["attention"]["kind"] = "performer";
  tune["attention"].erase("darkformer");
  tune["training"]["grad_accum"] = 2;
  ASSERT_NO_FATAL_FAILURE(train(tmp, "one", tune, 0));
  tune["training"]["grad_accum"] = 1;
  tune["output"]["dir"] = tmp / "two";
  ASSERT_NO_FATAL_FAILURE(train(tmp, "two", tune, 2));
  expect_same_runs(tmp / "one", tmp / "two");
  EXPECT_NE(read_all(tmp / "two.log").find("finetune.trainable:"), std::string::npos);
}

// Attention transfer (finetune.transfer) on 2 ranks: the same transferred weights, bit for bit,
// and the same per-layer errors as one process with twice the grad_accum (features redrawn
// during the transfer).
TEST(DataParallel, TransferOnTwoRanksEqualsOneProcessWithTwiceTheGradAccum) {
  require_mpirun();
  TempDir tmp;
  json source = tiny_config(tmp, "source", 5);
  source["training"]["generate_tokens"] = 0;
  ASSERT_NO_FATAL_FAILURE(train(tmp, "source", source, 0));
  json transfer = tiny_config(tmp, "one", 0);
  transfer.erase("model");
  transfer.merge_patch(json::parse(R"({
    "attention": {"kind": "darkformer", "num_features": 16, "redraw_interval": 2},
    "finetune": {"transfer": {"steps": 4, "lr": 0.01}},
    "schedule": {"warmup_steps": 0},
    "training": {"grad_accum": 2, "generate_tokens": 0}
  })"));
  transfer["finetune"]["init_from"] = tmp / "source";
  ASSERT_NO_FATAL_FAILURE(train(tmp, "one", transfer, 0));
  transfer["training"]["grad_accum"] = 1;
  transfer["output"]["dir"] = tmp / "two";
  ASSERT_NO_FATAL_FAILURE(train(tmp, "two", transfer, 2));
  const formats::CheckpointData a = formats::load_checkpoint(*formats::latest_checkpoint(tmp / "one"));
  const formats::CheckpointData b = formats::load_checkpoint(*formats::latest_checkpoint(tmp / "two"));
  EXPECT_EQ(a.step, 0);
  expect_identical(a.model, b.model, "transferred weights");
  json ja = json::parse(read_all(tmp / "one/transfer.json")), jb = json::parse(read_all(tmp / "two/transfer.json"));
  EXPECT_EQ(ja["ranks"], 1);
  EXPECT_EQ(jb["ranks"], 2);
  EXPECT_EQ(ja["tokens_per_step"], jb["tokens_per_step"]);
  EXPECT_EQ(ja["layers"], jb["layers"]);
  EXPECT_EQ(ja["last_loss"], jb["last_loss"]);
}

TEST(DataParallel, ZeroStageOneEqualsStageZero) {
  require_mpirun();
  TempDir tmp;
  for (int stage : {0, 1}) {
    const std::string name = "zero" + std::to_string(stage);
    json c = parallel_config(tmp, name, 12);
    c["distributed"]["zero_stage"] = stage;
    c["optimizer"]["grad_clip"] = 0.05;  // clipping on: the sharded gradient norm must be exact
    ASSERT_NO_FATAL_FAILURE(train(tmp, name, c, 2));
  }
  expect_same_runs(tmp / "zero0", tmp / "zero1");
  EXPECT_NE(read_all(tmp / "zero1.log").find("ZeRO stage 1: optimizer state"), std::string::npos);
}

// The pid of the process that is rank `rank` of the mpirun job `launcher`.
std::optional<pid_t> rank_pid(pid_t launcher, int rank) {
  const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (const pid_t pid : dark::testing::children_of(launcher)) {
    const std::string env = read_all(fs::path("/proc") / std::to_string(pid) / "environ");
    std::size_t pos = 0;
    for (std::size_t end; (end = env.find('\0', pos)) != std::string::npos; pos = end + 1)
      if (env.compare(pos, end - pos, want) == 0) return pid;
  }
  return std::nullopt;
}

// Starts a 2-rank run, waits until it has logged step `at_step`, then sends `signal` to rank 1;
// returns the job's exit code and how long it took to end after the signal.
std::pair<std::optional<int>, double> interrupt_rank_one(const std::vector<std::string>& argv, const fs::path& log,
                                                         const fs::path& run_dir, std::int64_t at_step, int signal) {
  const pid_t job = dark::testing::start_child(argv, log);
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < deadline && (step_lines(run_dir).empty() || step_lines(run_dir).rbegin()->first < at_step))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const std::optional<pid_t> victim = rank_pid(job, 1);
  EXPECT_TRUE(victim.has_value()) << "rank 1 not found; log:\n" << read_all(log);
  if (victim) ::kill(*victim, signal);
  const auto t0 = Clock::now();
  const std::optional<int> code = dark::testing::wait_child(job, std::chrono::seconds(60));
  if (victim && signal == SIGSTOP) ::kill(*victim, SIGKILL);
  return {code, std::chrono::duration<double>(Clock::now() - t0).count()};
}

TEST(DataParallel, AKilledRankEndsTheJobAndResumeReachesTheSameLoss) {
  require_mpirun();
  TempDir tmp;
  const int steps = 400;
  json c = parallel_config(tmp, "killed", steps);
  c["training"]["checkpoint_interval"] = 20;
  c["training"]["eval_interval"] = 1000;
  c["distributed"]["timeout_s"] = 30;
  const fs::path config = write_config(tmp, "killed", c);
  const auto [code, seconds] =
      interrupt_rank_one(mpirun(2, {"train", "--config", config}), tmp / "killed.log", tmp / "killed", 50, SIGKILL);
  ASSERT_TRUE(code.has_value()) << "the job did not end within 60 s of the kill:\n" << read_all(tmp / "killed.log");
  EXPECT_NE(*code, 0) << read_all(tmp / "killed.log");
  EXPECT_LT(seconds, 30.0);
  const auto latest = formats::latest_checkpoint(tmp / "killed");
  ASSERT_TRUE(latest.has_value());
  const formats::CheckpointData saved = formats::load_checkpoint(*latest);
  ASSERT_GE(saved.step, 40);
  ASSERT_LT(saved.step, steps) << "the run ended before the kill; make it longer";

  // A checkpoint does not depend on the number of ranks: one process with twice the
  // grad_accum continues the 2-rank run exactly (and says nothing about the global batch).
  ASSERT_EQ(run({DARKFORMER_EXE, "train", "--config", config, "--resume", "--set", "training.grad_accum=2"},
                tmp / "resumed.log"),
            0)
      << read_all(tmp / "resumed.log");
  EXPECT_EQ(read_all(tmp / "resumed.log").find("global batch changes"), std::string::npos);
  json whole = c;
  whole["output"]["dir"] = tmp / "whole";
  ASSERT_NO_FATAL_FAILURE(train(tmp, "whole", whole, 2));
  EXPECT_EQ(step_lines(tmp / "killed").at(steps), step_lines(tmp / "whole").at(steps));
  expect_identical(formats::load_checkpoint(*formats::latest_checkpoint(tmp / "killed")).model,
                   formats::load_checkpoint(*formats::latest_checkpoint(tmp / "whole")).model, "final weights");
}

TEST(DataParallel, ARankThatStopsAnsweringEndsTheJobWithinTheTimeout) {
  require_mpirun();
  TempDir tmp;
  json c = parallel_config(tmp, "hung", 400);
  c["distributed"]["timeout_s"] = 3;
  c["training"]["eval_interval"] = 1000;
  const auto [code, seconds] = interrupt_rank_one(mpirun(2, {"train", "--config", write_config(tmp, "hung", c)}),
                                                  tmp / "hung.log", tmp / "hung", 10, SIGSTOP);
  const std::string log = read_all(tmp / "hung.log");
  ASSERT_TRUE(code.has_value()) << "the job did not end within 60 s:\n" << log;
  EXPECT_NE(*code, 0) << log;
  EXPECT_LT(seconds, 20.0) << log;
  EXPECT_NE(log.find("rank 0"), std::string::npos) << log;
  EXPECT_NE(log.find("did not finish within 3 s"), std::string::npos) << log;
}

TEST(DataParallel, RanksWithDifferentModelsStopWithAnErrorNamingTheTensor) {
  require_mpirun();
  TempDir tmp;
  json c = parallel_config(tmp, "mismatch", 5);
  const fs::path config = write_config(tmp, "mismatch", c);
  // MPMD: rank 0 with seed 3, rank 1 with seed 4.
  const std::vector<std::string> argv = {DARK_MPIEXEC, "--oversubscribe", "--allow-run-as-root", "--bind-to", "none",
                                         "-x", "OMP_NUM_THREADS", "-np", "1", DARKFORMER_EXE, "train", "--config",
                                         config, ":", "-np", "1", DARKFORMER_EXE, "train", "--config", config,
                                         "--set", "seed=4"};
  EXPECT_NE(run(argv, tmp / "mismatch.log"), 0);
  const std::string log = read_all(tmp / "mismatch.log");
  EXPECT_NE(log.find("the parameters and attention state at the start differ across ranks: 'model."), std::string::npos)
      << log;
  EXPECT_NE(log.find("on rank(s) 1 is not rank 0's"), std::string::npos) << log;
}

}  // namespace
}  // namespace dark::train
