// The memory pre-flight (train/memory_estimate.h, train/memory_limit.h): the parameter
// table against the model build_model makes, the breakdown against hand-computed numbers
// and against the real flat buffers and optimizer, the refusal of a model that cannot fit
// before anything is allocated, training.memory_check, and the /proc and cgroup parsers on
// sample file contents.
#include <gtest/gtest.h>

#include <string>

#include "core/allocator.h"
#include "nn/optim.h"
#include "nn/parameter_buffer.h"
#include "tests/test_util.h"
#include "tests/train_test_util.h"
#include "train/config.h"
#include "train/swap/finetune.h"
#include "train/memory_estimate.h"
#include "train/memory_limit.h"
#include "train/model_builder.h"
#include "train/trainer.h"

namespace dark::train {
namespace {

using dark::testing::TempDir;
using nlohmann::json;

// A resolved config without data: vocab_size set by hand.
RunConfig config_of(const std::string& text, int vocab = 16) {
  RunConfig c = parse_config(json::parse(text), "t");
  c.model.vocab_size = vocab;
  c.model.max_seq_len = c.data.seq_len;
  validate_config(c);
  return c;
}

constexpr const char* kTiny = R"({
  "model": {"d_model": 8, "n_layers": 1, "n_heads": 2, "d_ff": 16},
  "data": {"seq_len": 4},
  "training": {"batch_size": 2, "steps": 10},
  "schedule": {"warmup_steps": 0}
})";

TEST(MemoryEstimate, ParameterShapesAreTheModelsForEveryKind) {
  for (const char* attention : {R"({"kind": "softmax"})", R"({"kind": "performer", "num_features": 12})",
                                R"({"kind": "lfk", "num_features": 6})",
                                R"({"kind": "darkformer", "darkformer": {"rank": 4}})",
                                R"({"kind": "darkformer", "darkformer": {"scope": "layer"}})",
                                R"({"kind": "performer", "layers": {"1": {"kind": "lfk"}}})",
                                R"({"kind": "darkformer", "exact_window": 4, "window_balance": true})"}) {
    json doc = json::parse(R"({"model": {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
                                          "tie_embeddings": false},
                               "data": {"seq_len": 8}, "training": {"steps": 10}, "schedule": {"warmup_steps": 0}})");
    doc["attention"] = json::parse(attention);
    const RunConfig c = config_of(doc.dump(), 40);
    const auto model = build_model(c);
    std::vector<std::pair<std::string, std::int64_t>> built, estimated;
    for (auto& [name, p] : model->named_parameters()) built.emplace_back(name, p->numel());
    for (const ParameterShape& p : parameter_shapes(c)) estimated.emplace_back(p.name, p.numel);
    std::sort(built.begin(), built.end()), std::sort(estimated.begin(), estimated.end());
    EXPECT_EQ(estimated, built) << attention;
    EXPECT_EQ(estimate_memory(c, {}).numel, model->num_parameters()) << attention;
  }
}

// Gemma 3's family: q/k norms, four norms a block, and heads wider than d_model / n_heads.
TEST(MemoryEstimate, ParameterShapesAreTheModelsForGemma3) {
  const RunConfig c = config_of(R"({"model": {"family": "gemma3", "d_model": 32, "n_layers": 3, "n_heads": 4,
                                              "n_kv_heads": 1, "head_dim": 16, "mlp": "geglu_tanh",
                                              "sliding_window": 4, "sliding_window_pattern": 2},
                                    "attention": {"kind": "darkformer"},
                                    "data": {"seq_len": 8}, "training": {"steps": 10}, "schedule": {"warmup_steps": 0}})",
                                40);
  const auto model = build_model(c);
  std::vector<std::pair<std::string, std::int64_t>> built, estimated;
  for (auto& [name, p] : model->named_parameters()) built.emplace_back(name, p->numel());
  for (const ParameterShape& p : parameter_shapes(c)) estimated.emplace_back(p.name, p.numel);
  std::sort(built.begin(), built.end()), std::sort(estimated.begin(), estimated.end());
  EXPECT_EQ(estimated, built);
}

// The tiny model by hand: V 16, d 8, one block, d_ff 16. Parameters: embedding 16*8 = 128,
// two norms 8 each, q, k, v, o 64 each, gate and up 16*8 = 128 each, down 128, final norm
// 8: 792 in 11 tensors, each under 512 bytes, so one 512-byte block each (5632 bytes). The
// flat buffer aligns segments to 16 floats (the three 8-element norms take 16: 816) and pads
// to 4096 elements: 16384 bytes, for the parameters and again for the gradients.
TEST(MemoryEstimate, ParametersGradientsOptimizerByHand) {
  const RunConfig c = config_of(kTiny);
  const MemoryEstimate adam = estimate_memory(c, {});
  EXPECT_EQ(adam.numel, 792);
  EXPECT_EQ(adam.trainable_numel, 792);
  EXPECT_EQ(adam.parameters, 11 * 512 + 16384);
  EXPECT_EQ(adam.gradients, 16384);
  EXPECT_EQ(adam.optimizer, 2 * 16384);  // AdamW: two moments

  RunConfig sgd = c;
  sgd.optimizer.name = nn::OptimizerKind::sgd;
  EXPECT_EQ(estimate_memory(sgd, {}).optimizer, 16384);  // momentum

  // ZeRO stage 1 on 4 ranks: the buffers pad to 4 * 4096 elements, each rank keeps a quarter.
  RunConfig zero = c;
  zero.distributed.zero_stage = 1;
  EstimateContext four;
  four.world_size = 4;
  const MemoryEstimate z = estimate_memory(zero, four);
  EXPECT_EQ(z.gradients, 4 * 16384);
  EXPECT_EQ(z.optimizer, 2 * 16384);

  // Frozen parameters: no gradient, no optimizer state (only q_proj's 64 elements train).
  RunConfig frozen = c;
  frozen.finetune.trainable = {"*q_proj*"};
  const MemoryEstimate f = estimate_memory(frozen, {});
  EXPECT_EQ(f.trainable_numel, 64);
  EXPECT_EQ(f.parameters, 11 * 512 + 16384);  // the flat buffer still pads to 4096 elements
  EXPECT_EQ(f.numel - f.trainable_numel, 728);

  // Finetuning from a source held in memory (CPU): its 11 blocks leave before training, and
  // loading is what is resident, the model as built and its largest weight's temporary.
  EstimateContext with_source;
  with_source.holds_source = true;
  with_source.resident_bytes = 1 << 20;
  const MemoryEstimate src = estimate_memory(frozen, with_source);
  EXPECT_EQ(src.source, 11 * 512);
  EXPECT_EQ(src.loading, src.overhead + src.parameters + 512);
  EXPECT_EQ(src.training(), src.parameters + src.gradients + src.optimizer + src.activations + src.backward +
                                src.data + src.overhead - 11 * 512);
  EXPECT_EQ(src.total(), std::max(src.training(), src.loading));
  EXPECT_EQ(f.source, 0);
  EXPECT_EQ(f.loading, 0);
  EXPECT_EQ(f.total(), f.training());
  with_source.device = Device::cuda(0);  // the source stays in host memory: nothing to subtract on the GPU
  EXPECT_EQ(estimate_memory(frozen, with_source).source, 0);
}

// The same quantities against the real buffers of a model large enough for the rounding to
// matter: the flat buffers' numel and the optimizer's state_bytes.
TEST(MemoryEstimate, BuffersMatchTheRealParameterBufferAndOptimizer) {
  for (const char* optimizer : {"adamw", "sgd"}) {
    json doc = json::parse(R"({"model": {"d_model": 64, "n_layers": 2, "n_heads": 4},
                               "attention": {"kind": "lfk"}, "data": {"seq_len": 16},
                               "training": {"steps": 10}, "schedule": {"warmup_steps": 0},
                               "finetune": {"trainable": ["limited_attention"]}})");
    doc["optimizer"] = {{"name", optimizer}};
    const RunConfig c = config_of(doc.dump(), 300);
    auto model = build_model(c);
    const Freezing freezing = freeze_parameters(*model, c.finetune.trainable);
    nn::ParameterBuffer buffer(freezing.trainable, 1);
    nn::Optimizer opt(buffer, c.optimizer, nn::FlatRange{});
    const MemoryEstimate e = estimate_memory(c, {});
    EXPECT_EQ(e.trainable_numel, freezing.trainable_numel) << optimizer;
    EXPECT_EQ(e.gradients, static_cast<std::int64_t>(CachingAllocator::round_size(buffer.numel() * 4))) << optimizer;
    EXPECT_EQ(e.optimizer, static_cast<std::int64_t>(opt.state_bytes() / (buffer.numel() * 4)) *
                               static_cast<std::int64_t>(CachingAllocator::round_size(buffer.numel() * 4)))
        << optimizer;
  }
}

TEST(MemoryEstimate, ActivationsFollowTheRunsShape) {
  const RunConfig c = config_of(R"({"model": {"d_model": 64, "n_layers": 4, "n_heads": 4},
      "data": {"seq_len": 128}, "training": {"batch_size": 8, "steps": 10}, "schedule": {"warmup_steps": 0}})", 512);
  const MemoryEstimate base = estimate_memory(c, {});
  RunConfig bigger = c;
  bigger.training.batch_size = 16;
  // Twice the tokens: about twice the activations (the allocator's rounding aside).
  EXPECT_NEAR(static_cast<double>(estimate_memory(bigger, {}).activations) / static_cast<double>(base.activations), 2.0,
              0.15);
  RunConfig checkpointed = c;
  checkpointed.training.activation_checkpointing = true;
  EXPECT_LT(estimate_memory(checkpointed, {}).activations, base.activations / 3);
  // The random-feature kinds make their (N, H, m) logits chunk by chunk in kernel scratch:
  // more features, no more tensor memory (the feature matrices are parameters).
  RunConfig performer = c;
  performer.attention.kind = attention::Kind::performer;
  performer.attention.num_features = 64;
  RunConfig wide = performer;
  wide.attention.num_features = 512;
  EXPECT_EQ(estimate_memory(wide, {}).backward, estimate_memory(performer, {}).backward);
  EXPECT_EQ(estimate_memory(wide, {}).activations, estimate_memory(performer, {}).activations);
  // The process's own memory and the shards are added as given.
  EstimateContext ctx;
  ctx.resident_bytes = 7 << 20;
  ctx.data_bytes = 3 << 20;
  const MemoryEstimate with = estimate_memory(c, ctx);
  EXPECT_EQ(with.overhead - base.overhead, 7 << 20);
  EXPECT_EQ(with.data - base.data, 3 << 20);
  EXPECT_EQ(with.total(), with.parameters + with.gradients + with.optimizer + with.activations + with.backward +
                              with.data + with.overhead);
}

TEST(MemoryEstimate, AboveTheLimitErrorWarnOrOff) {
  RunConfig c = config_of(kTiny);
  const MemoryEstimate e = estimate_memory(c, {});
  const MemoryLimit small{e.total() / 2, "a test limit"};
  try {
    check_memory_fits(e, small, c, 0);
    FAIL() << "expected a refusal";
  } catch (const Error& err) {
    const std::string what = err.what();
    for (const char* part : {"memory: the run needs about", "a test limit", "parameters", "activations",
                             "training.batch_size (now 2", "training.grad_accum", "data.seq_len (now 4)",
                             "training.activation_checkpointing true", "model.d_model 8", "training.memory_check"})
      EXPECT_NE(what.find(part), std::string::npos) << part << " in: " << what;
  }
  // What the process already holds is in the limit's numbers already (CPU): not needed twice.
  EXPECT_NO_THROW(check_memory_fits(e, MemoryLimit{e.total() - 1000, "x"}, c, 1000));
  EXPECT_NO_THROW(check_memory_fits(e, MemoryLimit{e.total(), "x"}, c, 0));
  EXPECT_NO_THROW(check_memory_fits(e, std::nullopt, c, 0));  // no limit known
  c.training.memory_check = MemoryCheck::warn;
  EXPECT_NO_THROW(check_memory_fits(e, small, c, 0));
  c.training.memory_check = MemoryCheck::off;
  EXPECT_NO_THROW(check_memory_fits(e, small, c, 0));
}

TEST(MemoryEstimate, MemoryCheckKey) {
  EXPECT_EQ(config_of(kTiny).training.memory_check, MemoryCheck::error);
  json doc = json::parse(kTiny);
  doc["training"]["memory_check"] = "warn";
  EXPECT_EQ(config_of(doc.dump()).training.memory_check, MemoryCheck::warn);
  doc["training"]["memory_check"] = "maybe";
  try {
    config_of(doc.dump());
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("training.memory_check: \"maybe\" is not one of error, warn, off"),
              std::string::npos)
        << err.what();
  }
}

// d_model 65536 and 64 layers (~3 * 10^12 parameters) is refused before the model exists:
// fast, and the process never holds more than it did before.
TEST(MemoryEstimate, ImpossibleModelIsRefusedBeforeAllocating) {
  TempDir tmp;
  json doc = tiny_config(tmp, "run", 10);
  doc["model"] = {{"d_model", 65536}, {"n_layers", 64}, {"n_heads", 512}};
  doc["training"]["generate_tokens"] = 0;
  const RunConfig c = parse_config(doc, "t");
  const std::int64_t before = peak_resident_bytes();
  try {
    train(c, {});
    FAIL() << "expected a refusal";
  } catch (const Error& err) {
    const std::string what = err.what();
    EXPECT_NE(what.find("memory: the run needs about"), std::string::npos) << what;
    EXPECT_NE(what.find("model.d_model 65536"), std::string::npos) << what;
    EXPECT_TRUE(what.find("MemAvailable") != std::string::npos || what.find("cgroup") != std::string::npos) << what;
  }
  // Nothing of the model was allocated: the peak stays within a few MiB of where it was.
  EXPECT_LT(peak_resident_bytes() - before, std::int64_t{64} << 20);
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(tmp / "run") / "checkpoints"));
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(tmp / "run") / "config.json"));  // nothing written
}

TEST(MemoryLimit, ParsesMeminfo) {
  const std::string meminfo =
      "MemTotal:       24684084 kB\nMemFree:         1234567 kB\nMemAvailable:   22103536 kB\nBuffers: 1 kB\n";
  EXPECT_EQ(parse_meminfo_available(meminfo), std::int64_t{22103536} * 1024);
  EXPECT_EQ(parse_meminfo_available("MemTotal: 100 kB\n"), std::nullopt);
  EXPECT_EQ(parse_meminfo_available(""), std::nullopt);
}

TEST(MemoryLimit, ParsesCgroupFiles) {
  EXPECT_EQ(parse_cgroup_bytes("8589934592\n"), std::int64_t{8589934592});
  EXPECT_EQ(parse_cgroup_bytes("max\n"), std::nullopt);             // v2: no limit
  EXPECT_EQ(parse_cgroup_bytes(""), std::nullopt);                  // missing file
  EXPECT_EQ(parse_cgroup_bytes("12abc"), std::nullopt);             // not a number
  EXPECT_EQ(parse_cgroup_bytes("99999999999999999999"), std::nullopt);  // beyond int64
  EXPECT_EQ(parse_cgroup_bytes("9223372036854771712\n"), std::int64_t{9223372036854771712});  // v1's "no limit"
  const std::string stat = "cache 100\nrss 200\ninactive_file 4096\ntotal_inactive_file 8192\n";
  EXPECT_EQ(parse_memory_stat(stat, "inactive_file"), 4096);
  EXPECT_EQ(parse_memory_stat(stat, "total_inactive_file"), 8192);
  EXPECT_EQ(parse_memory_stat(stat, "active_file"), std::nullopt);
  EXPECT_EQ(parse_cgroup_v2_path("12:memory:/docker/abc\n0::/user.slice/job-42\n"), "/user.slice/job-42");
  EXPECT_EQ(parse_cgroup_v2_path("0::/\n"), "/");
  EXPECT_EQ(parse_cgroup_v2_path("4:memory:/process_api/x\n1:cpu:/\n"), std::nullopt);  // v1 only
}

TEST(MemoryLimit, ParsesStatusAndTakesTheSmallest) {
  const std::string status = "Name:\tdarkformer\nVmPeak:\t  900 kB\nVmHWM:\t    4321 kB\nVmRSS:\t    1234 kB\n";
  EXPECT_EQ(parse_status_kib(status, "VmHWM"), 4321 * 1024);
  EXPECT_EQ(parse_status_kib(status, "VmRSS"), 1234 * 1024);
  EXPECT_EQ(parse_status_kib(status, "VmSwap"), std::nullopt);
  const MemoryLimit a{100, "a"}, b{50, "b"};
  EXPECT_EQ(smallest(a, b)->source, "b");
  EXPECT_EQ(smallest(std::nullopt, a)->source, "a");
  EXPECT_FALSE(smallest(std::nullopt, std::nullopt).has_value());
  // This machine: a limit is known and the process holds something.
  const auto limit = machine_memory_limit(Device::cpu());
  ASSERT_TRUE(limit.has_value());
  EXPECT_GT(limit->bytes, 0);
  EXPECT_GT(resident_bytes(), 0);
  EXPECT_GE(peak_resident_bytes(), resident_bytes());
}

}  // namespace
}  // namespace dark::train
