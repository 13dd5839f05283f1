// Run set-up and checkpoints (see training_run.h).
#include "train/training_run.h"

#include <spdlog/spdlog.h>

#include <optional>

#include "autograd/grad_mode.h"
#include "core/allocator.h"
#include "core/backend.h"
#include "core/file_io.h"
#include "train/attention_state.h"
#include "train/device_setting.h"
#include "train/swap/finetune.h"
#include "train/memory_estimate.h"
#include "train/model_builder.h"
#include "nn/init.h"
#include "train/portable_checkpoint.h"
#include "train/stop_signal.h"
#include "train/swap/transfer.h"
#include "train/swap/transfer_state.h"

namespace dark::train {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A finetuned model must read the tokens it was trained on: the same tokenizer as its source.
void check_source_tokenizer(const InitSource& source, const RunConfig& config, const data::PreparedData& data) {
  std::string theirs = source.tokenizer_hash;  // a Hugging Face folder's, or recorded in our checkpoint
  if (theirs.empty() && source.data_dir.empty()) {  // a GGUF model: its own tokenizer
    DARK_CHECK(config.data.tokenizer == data::TokenizerKind::gguf, "config: data.tokenizer: a GGUF model (",
               source.path, ") reads the ids of its own tokenizer: use \"gguf\" (the default with a .gguf init_from)");
    return;
  }
  if (theirs.empty()) {  // a checkpoint from before tokenizers were recorded: ask its data folder
    if (!fs::exists(fs::path(source.data_dir) / "meta.json")) {
      spdlog::warn("init_from: {} was trained on {}, which no longer exists; cannot check that the tokenizers agree",
                   source.description, source.data_dir);
      return;
    }
    theirs = data::open_prepared(source.data_dir).tokenizer->hash();
  }
  DARK_CHECK(theirs == data.tokenizer->hash(), "init_from: ", source.description, " has tokenizer ", theirs,
             ", this run's data uses ", data.tokenizer->hash(), " (", config.data.dir,
             "): the token ids would not mean the same",
             source.data_dir.empty() ? "; leave data.tokenizer and data.tokenizer_model unset to use the folder's" : "");
}

// A resumed run continues the run its checkpoint belongs to: only its length, its folder, the
// device and ranks it runs on (so also grad_accum, to keep the global batch on another number
// of ranks, and the precision, activation checkpointing and subnormal flushing, which depend on
// the device) may change.
void check_resumable(const RunConfig& theirs, const RunConfig& ours, const fs::path& checkpoint, const fs::path& run_dir) {
  json a = to_json(theirs), b = to_json(ours);
  for (json* j : {&a, &b}) {
    for (const char* key :
         {"steps", "device", "grad_accum", "precision", "activation_checkpointing", "cuda_graph", "memory_check",
          "flush_denormals"})
      (*j)["training"].erase(key);
    j->erase("output"), j->erase("distributed");
  }
  DARK_CHECK(a == b, "--resume: the config differs from the one checkpoint ", checkpoint.filename().string(),
             " was trained with (only training.steps, training.device, training.grad_accum, training.precision, "
             "training.activation_checkpointing, training.cuda_graph, training.memory_check, training.flush_denormals, "
             "distributed and "
             "output.dir may change); see ",
             (run_dir / "config.json").string());
}

// Everything a checkpoint stores beyond tensors: enough to continue bit-exactly.
json trainer_state(const TrainingRun& run) {
  json epochs = json::array();
  for (nn::AttentionKernel* k : run.model->attention_kernels()) epochs.push_back(k->feature_epoch());
  return {{"config", to_json(run.config)},
          {"consecutive_skips", run.consecutive_skips},
          {"skipped_steps", run.skipped_total},
          // Data order and dropout masks are pure functions of (seed, step): nothing else to save.
          {"data_position", {{"kind", "step"}, {"seed", run.config.seed}}},
          // The global batch is batch_size x grad_accum x world_size (a resume may change it).
          {"world_size", run.world_size()},
          {"feature_epochs", epochs}};  // informative: the epochs are a function of the step
}

// Parameters by name, on the CPU (checkpoints are device-independent).
std::map<std::string, Tensor> parameters_on_cpu(nn::CausalLM& model) {
  std::map<std::string, Tensor> out;
  for (auto& [name, p] : model.named_parameters()) out[name] = p->to(Device::cpu());
  return out;
}

std::map<std::string, Tensor> on_cpu(std::map<std::string, Tensor> tensors) {
  for (auto& [name, t] : tensors) t = t.to(Device::cpu());
  return tensors;
}

void log_freezing(const Freezing& freezing, const RunConfig& config) {
  if (freezing.frozen.empty()) return;
  spdlog::info("finetune.trainable: {} of {} parameters train ({} tensors); {} frozen save {:.1f} MiB of gradients and "
               "optimizer state",
               freezing.trainable_numel, freezing.trainable_numel + freezing.frozen_numel, freezing.trainable.size(),
               freezing.frozen_numel, static_cast<double>(frozen_bytes_saved(freezing, config)) / (1 << 20));
}

// Non-zero ranks print only warnings and errors, prefixed with their rank. Under mpirun the
// ranks write to a terminal that mpirun forwards (often into a file): no colour codes.
void log_as_rank(const dist::Communicator& comm) {
  if (comm.backend() == dist::BackendKind::single) return;
  if (comm.rank() == 0) {
    spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
    return;
  }
  spdlog::set_level(spdlog::level::warn);
  spdlog::set_pattern(str("[%Y-%m-%d %H:%M:%S.%e] [rank ", comm.rank(), "] [%l] %v"));
}

// Prepares the data (tokenizer, shards) on one rank of each host first, so that the ranks
// of a host do not build the same files at once; the others then find them ready.
data::PreparedData prepare_data_once_per_host(RunConfig& config, dist::Communicator& comm) {
  if (config.data.task == data::DataTask::mqar) return {};  // a synthetic task: nothing to prepare
  if (comm.world_size() == 1) return prepare_data_for(config);
  std::optional<data::PreparedData> prepared;
  if (comm.local_rank() == 0) prepared = prepare_data_for(config);
  comm.barrier();
  if (!prepared) prepared = prepare_data_for(config);
  return std::move(*prepared);
}

// The global batch (sequences per optimizer step) of a config on `world_size` ranks.
std::int64_t global_batch(const RunConfig& config, int world_size) {
  return static_cast<std::int64_t>(config.training.batch_size) * config.training.grad_accum * world_size;
}

// A checkpoint does not depend on the number of ranks, so a run may resume on another
// number; the global batch, and so the data each step sees, then changes unless grad_accum
// was adjusted to keep it.
void warn_if_global_batch_changed(const formats::CheckpointData& checkpoint, const RunConfig& theirs, const RunConfig& config,
                                  int world_size) {
  const int their_world = checkpoint.state.value("world_size", 1);
  const std::int64_t before = global_batch(theirs, their_world), now = global_batch(config, world_size);
  if (before == now) return;
  spdlog::warn("--resume: the global batch changes from {} sequences ({} rank(s) x batch_size {} x grad_accum {}) to {} "
               "({} x {} x {}): the steps from here see other data than the uninterrupted run would; set "
               "training.grad_accum to keep {}",
               before, their_world, theirs.training.batch_size, theirs.training.grad_accum, now, world_size,
               config.training.batch_size, config.training.grad_accum, before);
}

// What must be identical on every rank: the parameters (frozen ones included) and the
// kernels' untrained attention state.
std::vector<std::pair<std::string, Tensor>> model_state(nn::CausalLM& model) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, p] : model.named_parameters()) out.emplace_back(name, *p);
  for (auto& [name, t] : attention_state_map(model)) out.emplace_back(name, t);
  return out;
}

// The start-up line of data parallelism: ranks, backend, batches, buckets, optimizer memory.
void log_data_parallel(const TrainingRun& run) {
  const RunConfig& c = run.config;
  const int world = run.world_size();
  const std::int64_t global = global_batch(c, world);
  const double state_mib = static_cast<double>(run.optimizer->state_bytes()) / (1024.0 * 1024.0);
  std::string comm = fmt::format("backend {}", enum_name(run.comm->backend()));
  std::string memory = fmt::format("optimizer state {:.1f} MiB", state_mib);
  if (run.parallel && run.parallel->zero_stage() == 1) {
    comm += ", gradients reduce-scattered after backward";
  } else if (run.parallel) {
    comm += fmt::format(", {} gradient bucket(s) of <= {:g} MiB all-reduced during backward", run.parallel->num_buckets(),
                        c.distributed.bucket_mb);
  }
  if (run.parallel) {
    memory = run.parallel->zero_stage() == 1
                 ? fmt::format("ZeRO stage 1: optimizer state {:.1f} MiB per rank ({:.1f} MiB unsharded)", state_mib,
                               state_mib * world)
                 : fmt::format("ZeRO stage 0: optimizer state {:.1f} MiB on every rank", state_mib);
  }
  spdlog::info("data parallel: {} rank(s), {}; batch {} per rank x grad_accum {} x {} rank(s) = global batch {} ({} "
               "tokens per step); {}",
               world, comm, c.training.batch_size, c.training.grad_accum, world, global, global * c.data.seq_len,
               memory);
}

}  // namespace

namespace {
// training.precision bf16 needs a GPU: every CUDA kernel has a bf16 twin, the CPU's are f32
// and f64 only. bf16 on a CPU would only pay with AVX512_BF16 or AMX-BF16; the message says
// which of them this CPU has.
void check_precision(Precision precision, Device device) {
  if (precision == Precision::f32 || device.is_cuda()) return;
  const bool avx512_bf16 = __builtin_cpu_supports("avx512bf16"), amx_bf16 = __builtin_cpu_supports("amx-bf16");
  const std::string cpu = avx512_bf16 || amx_bf16
                              ? str(" (this CPU has ", avx512_bf16 ? "AVX512_BF16" : "", avx512_bf16 && amx_bf16 ? " and " : "",
                                    amx_bf16 ? "AMX-BF16" : "", ", which darkformer does not use yet)")
                              : " (this CPU has neither AVX512_BF16 nor AMX-BF16, the instructions bf16 on a CPU needs)";
  throw Error(str("config: training.precision: bf16 mixed precision runs on a GPU (training.device cuda); the CPU "
                  "kernels are f32 and f64 only",
                  cpu, ": use training.precision f32 on ", device.to_string()));
}

// training.cuda_graph: a step graph repeats, at every launch, what the host decided at its
// capture; what would differ from step to step must not be in it.
void check_cuda_graph(const RunConfig& config, Device device, bool communicates) {
  if (!config.training.cuda_graph) return;
  DARK_CHECK(device.is_cuda(), "config: training.cuda_graph: CUDA graphs need a GPU (training.device cuda), not ",
             device.to_string());
  DARK_CHECK(!communicates, "config: training.cuda_graph: not under mpirun yet (the gradients' all-reduce that "
             "overlaps the last backward is not captured): set training.cuda_graph false");
}

// Where a run's weights come from: the latest checkpoint (--resume), a finetuning source, or
// nowhere (a fresh run). A finetuning run takes the architecture of where its weights come from.
struct WeightsOrigin {
  std::optional<formats::CheckpointData> checkpoint;
  std::optional<RunConfig> checkpoint_config;  // the config the checkpoint was trained with
  fs::path checkpoint_dir;
  std::optional<InitSource> source;
};
WeightsOrigin find_weights(RunConfig& config, const fs::path& dir, bool resume, bool finetuning);

// The model on its device with the source's weights (a finetuning run) or none yet (a
// resumed run: its checkpoint's come in make_trainable). Frees the source once the model
// holds its weights.
void build_model_with_weights(TrainingRun& run, std::optional<InitSource>& source, bool resumed);
// What training needs of the model: the trainable parameters' flat buffer (the rest frozen),
// data parallelism and the optimizer, with the checkpoint's state when resuming. After the
// attention transfer, which trains its own tensors (train/swap/transfer.h).
void make_trainable(TrainingRun& run, const std::optional<formats::CheckpointData>& checkpoint, bool communicates);

// The training loader and validation set, on the model's device.
void open_data_streams(TrainingRun& run);

}  // namespace

TrainingRun start_run(RunConfig config, bool resume) {
  TrainingRun run;
  run.dir = config.output.dir;
  run.device = resolve_device(config.training.device);
  check_precision(config.training.precision, run.device);
  run.comm = dist::make_communicator(config.distributed.backend, run.device, config.distributed.timeout_s);
  // Under mpirun (any backend but single, even with one rank) the run goes through data
  // parallelism, and a GPU run takes the GPU of its local rank.
  const bool communicates = run.comm->backend() != dist::BackendKind::single;
  if (run.device.is_cuda() && communicates) run.device = run.comm->device();
  check_cuda_graph(config, run.device, communicates);
  // Which CUDA backend serves the run: the CUDA runtime, or (in a test program) the emulator.
  if (run.device.is_cuda()) spdlog::info("device {}: served by {}", run.device.to_string(), backend_name(DeviceType::cuda));
  log_as_rank(*run.comm);
  // One writer per run folder, before anything reads or writes its state.
  if (run.writes()) run.lock.emplace(run.dir);
  run.finetuning = !config.finetune.init_from.empty();

  WeightsOrigin origin = find_weights(config, run.dir, resume, run.finetuning);
  run.data = prepare_data_once_per_host(config, *run.comm);
  // A tokenizer read from a file (a GGUF model's, a Hugging Face folder's) brings its own
  // vocabulary: the printed and saved config say that one, not data.vocab_size's default,
  // which sizes only a tokenizer trained here.
  if (!config.data.tokenizer_model.empty() && run.data.tokenizer) config.data.vocab_size = run.data.tokenizer->vocab_size();
  validate_config(config);
  if (origin.source) check_source_tokenizer(*origin.source, config, run.data);
  if (origin.checkpoint) {
    check_resumable(*origin.checkpoint_config, config, origin.checkpoint_dir, run.dir);
    warn_if_global_batch_changed(*origin.checkpoint, *origin.checkpoint_config, config, run.world_size());
    spdlog::info("resuming from {} (step {})", origin.checkpoint_dir.string(), origin.checkpoint->step);
  } else {
    DARK_CHECK(formats::list_checkpoints(run.dir).empty(), "run folder ", run.dir.string(),
               " already has checkpoints: pass --resume to continue it, or set output.dir to a new folder");
    DARK_CHECK(resume || !transfer_in_progress(run.dir), "run folder ", run.dir.string(),
               " holds an attention transfer that stopped before its end (", (run.dir / "transfer").string(),
               "): pass --resume to continue it, or set output.dir to a new folder");
  }
  // Before the first write to the run folder: a run refused here leaves it as it was.
  run.memory = memory_preflight(config, run.world_size(), run.device, run.data, origin.source.has_value());
  // Every rank has read the run folder before rank 0 writes to it.
  run.comm->barrier();
  if (run.writes()) {
    fs::create_directories(run.dir);
    write_resolved(config, run.dir);
  }
  spdlog::info("config:\n{}", config_table(config));
  run.config = std::move(config);
  const RunConfig& c = run.config;

  const bool resumed = origin.checkpoint.has_value();
  build_model_with_weights(run, origin.source, resumed);
  open_data_streams(run);
  // Calibration reads the same global batches on every rank, so its result is the same
  // everywhere (and the same as a one-process run's) without communication.
  if (!resumed) calibrate_attention(*run.model, c, *run.loader);
  // Attention transfer starts from the calibrated kernels; a resumed run has done it already.
  if (!resumed && c.finetune.transfer.steps > 0) {
    const TransferKeeping keeping{run.dir, run.writes(), [&run] { return stop_requested(run); }};
    const TransferReport transfer = run_transfer(*run.model, c, *run.loader, *run.val, *run.comm, keeping);
    run.stopped_in_transfer = transfer.stopped;
    if (run.writes() && !transfer.stopped) write_file_atomic(run.dir / "transfer.json", transfer.to_json().dump(2) + "\n");
    if (transfer.stopped) return run;
  }
  make_trainable(run, origin.checkpoint, communicates);
  if (c.training.cuda_graph) run.step_graph = std::make_unique<StepGraph>(run.device);
  run.redraw_intervals = redraw_intervals(c);
  set_feature_epochs(*run.model, run.redraw_intervals, run.step);
  log_data_parallel(run);
  check_same_on_every_rank(*run.comm, model_state(*run.model), "the parameters and attention state at the start");
  return run;
}

bool stop_requested(const TrainingRun& run) {
  const bool here = StopSignals::received() != 0;
  if (run.comm->backend() == dist::BackendKind::single) return here;
  const Tensor flag = Tensor::full({1}, here ? 1.0 : 0.0, DType::i32, run.comm->device());
  run.comm->all_reduce(flag, dist::ReduceOp::max);
  return flag.to_vector<std::int32_t>()[0] != 0;
}

namespace {

WeightsOrigin find_weights(RunConfig& config, const fs::path& dir, bool resume, bool finetuning) {
  WeightsOrigin origin;
  // A transfer stopped before the run's first checkpoint continues from its own state
  // (train/swap/transfer_state.h): the weights come from the source again.
  const bool transfer_only = resume && finetuning && !formats::latest_checkpoint(dir) && transfer_in_progress(dir);
  if (resume && !transfer_only) {
    const auto latest = formats::latest_checkpoint(dir);
    DARK_CHECK(latest.has_value(), "--resume: no checkpoint in ", (dir / "checkpoints").string());
    origin.checkpoint_dir = *latest;
    origin.checkpoint = formats::load_checkpoint(origin.checkpoint_dir);
    origin.checkpoint_config = parse_saved_config(origin.checkpoint->state.at("config"));
    // A checkpoint saved before data.windows existed trained on packed windows: its run goes on
    // with them (bit for bit), unless the config names data.windows (then they must agree).
    if (!origin.checkpoint->state.at("config").at("data").contains("windows") && !config.given.contains("data.windows")) {
      config.data.windows = origin.checkpoint_config->data.windows;
      spdlog::info("--resume: {} was saved before data.windows existed: its run continues on packed windows",
                   origin.checkpoint_dir.string());
    }
    // The weights come from the checkpoint; its config already holds the source's shape.
    if (finetuning) adopt_architecture(config, origin.checkpoint_config->model, "the checkpoint's config");
  } else if (finetuning) {
    origin.source = load_init_source(config.finetune.init_from);
    adopt_architecture(config, origin.source->model, origin.source->description);
  }
  return origin;
}

void build_model_with_weights(TrainingRun& run, std::optional<InitSource>& source, bool resumed) {
  const RunConfig& c = run.config;
  if (resumed) {
    const nn::SkipInitialisation loaded_next;  // a resumed run: every parameter comes from its checkpoint
    run.model = build_model(c);
  } else {
    run.model = build_model(c);  // a finetuning source may lack a swap's new parameters: drawn here
  }
  if (source) load_source_weights(*run.model, *source);
  if (source) {
    // The model holds the weights now. The source's tensors and the random initialisation
    // they replaced go back to the system, not to the allocator's cache, whose blocks of
    // those sizes training would never reuse (for Gemma 3 270M: ~1.7 GiB of resident set).
    source.reset();
    release_cached_host_memory();
  }
  run.model->to(run.device);
  run.model->activation_checkpointing = c.training.activation_checkpointing;
  if (c.training.precision == Precision::bf16) run.model->set_compute_dtype(DType::bf16);
}

void make_trainable(TrainingRun& run, const std::optional<formats::CheckpointData>& checkpoint, bool communicates) {
  const RunConfig& c = run.config;
  const Freezing freezing = freeze_parameters(*run.model, c.finetune.trainable);
  log_freezing(freezing, c);
  run.params = std::make_unique<nn::ParameterBuffer>(freezing.trainable, run.world_size());
  if (communicates) run.parallel = std::make_unique<DataParallel>(*run.comm, *run.params, c.distributed);
  run.optimizer = std::make_unique<nn::Optimizer>(*run.params, c.optimizer,
                                                  run.parallel ? run.parallel->optimizer_shard() : nn::FlatRange{});
  if (checkpoint) {
    load_parameters(*run.model, checkpoint->model, "checkpoint " + formats::checkpoint_name(checkpoint->step));
    run.optimizer->load_state(checkpoint->optimizer);
    run.step = checkpoint->step;
    load_attention_state(*run.model, checkpoint->attention);
    run.consecutive_skips = checkpoint->state.value("consecutive_skips", std::int64_t{0});
    run.skipped_total = checkpoint->state.value("skipped_steps", std::int64_t{0});
    run.resumed = true;
  }
}

// How many windows the run reads and what share of each split's tokens they cover.
void log_windows(const data::TrainLoader& loader, const data::ValidationSet& val, std::int64_t val_windows_asked) {
  const data::WindowLayout &t = loader.layout(), &v = val.layout();
  spdlog::info("data: {} windows of seq_len + 1 = {} tokens: train {} covering {:.1f}% of its {} tokens ({} "
               "documents); val {} of {} covering {:.1f}% of its {} tokens",
               enum_name(t.mode()), t.seq_len() + 1, t.size(), 100.0 * t.token_share(), t.shard_tokens(),
               t.documents(), val.num_windows(), v.size(), 100.0 * v.token_share(), v.shard_tokens());
  if (val.num_windows() < val_windows_asked)
    spdlog::warn("data: the validation split has {} {} windows of {} tokens, fewer than data.val_windows {}; every "
                 "evaluation uses those {}", v.size(), enum_name(v.mode()), v.seq_len() + 1, val_windows_asked,
                 v.size());
}

// data.task mqar: the task's training source (keyed by the run's seed) and its fixed validation set.
void open_mqar_streams(TrainingRun& run) {
  const RunConfig& c = run.config;
  const data::MqarConfig& q = c.data.mqar;
  run.loader = std::make_unique<data::MqarTrainSource>(q, c.training.batch_size, c.data.seq_len, c.seed, run.device);
  auto val = std::make_unique<data::MqarValidationSet>(q, c.training.batch_size, c.data.seq_len, run.device);
  run.mqar_val = val.get();
  run.val = std::move(val);
  std::string pairs;
  for (const std::int64_t m : q.pairs) pairs += (pairs.empty() ? "" : ", ") + std::to_string(m);
  spdlog::info("data: MQAR, sequences of data.seq_len + 1 = {} tokens with {{{}}} key-value pairs, vocabulary {} ({} "
               "keys), query gaps of power {}; {} validation sequences (seed {})",
               c.data.seq_len + 1, pairs, q.vocab, data::mqar_keys(q.vocab), q.power, q.val_sequences, q.val_seed);
  spdlog::info("model: {} parameters ({} layers, d_model {}, {} heads, attention {}) on {}", run.model->num_parameters(),
               c.model.n_layers, c.model.d_model, c.model.n_heads, enum_name(c.attention.kind), run.device.to_string());
}

void open_data_streams(TrainingRun& run) {
  const RunConfig& c = run.config;
  if (c.data.task == data::DataTask::mqar) return open_mqar_streams(run);
  data::LoaderOptions lo;
  lo.batch_size = c.training.batch_size;
  lo.seq_len = c.data.seq_len;
  lo.seed = c.seed;
  lo.device = run.device;
  lo.bos_id = run.data.window_bos_id;
  lo.windows = c.data.windows;
  auto loader = std::make_unique<data::TrainLoader>(run.data.open_shard(data::Split::train), lo);
  auto val = std::make_unique<data::ValidationSet>(run.data.open_shard(data::Split::val), c.training.batch_size,
                                                   c.data.seq_len, c.data.val_windows, run.device,
                                                   run.data.window_bos_id, c.data.windows);
  log_windows(*loader, *val, c.data.val_windows);
  run.loader = std::move(loader);
  run.val = std::move(val);
  spdlog::info("model: {} parameters ({} layers, d_model {}, {} heads, attention {}) on {}; data: {} train tokens, {} val "
               "windows{}",
               run.model->num_parameters(), c.model.n_layers, c.model.d_model, c.model.n_heads,
               enum_name(c.attention.kind), run.device.to_string(), run.data.train_tokens, run.val->num_windows(),
               run.data.window_bos_id >= 0 ? fmt::format(", each starting with bos ({})", run.data.window_bos_id) : "");
}

}  // namespace

void save_run(TrainingRun& run) {
  // Every rank has finished the step; the ranks still agree on the weights (a rank that
  // drifted, e.g. from a nondeterministic kernel, is caught here rather than saved).
  run.comm->barrier();
  check_same_on_every_rank(*run.comm, model_state(*run.model), "the parameters and attention state at step " +
                                                                   std::to_string(run.step));
  formats::CheckpointData ck;
  ck.step = run.step;
  // The optimizer state is whole in every checkpoint: under ZeRO-1 every rank takes part in
  // gathering the slices.
  if (run.parallel && run.parallel->zero_stage() == 1) {
    ck.optimizer = run.optimizer->state([&run](const Tensor& slice) { return run.parallel->gather_shard(slice); });
  }
  if (!run.writes()) return;
  ck.optimizer = on_cpu(ck.optimizer.empty() ? run.optimizer->state() : std::move(ck.optimizer));
  ck.model = parameters_on_cpu(*run.model);
  ck.attention = attention_state_map(*run.model);
  ck.state = trainer_state(run);
  if (run.data.tokenizer)
    record_run_files(ck, *run.data.tokenizer, run.data.dir, run.data.window_bos_id >= 0);  // usable without the data folder
  else
    ck.state["task"] = std::string(enum_name(run.config.data.task));  // MQAR: no tokenizer, no data folder
  const fs::path where = formats::save_checkpoint(run.dir, ck, run.config.training.keep_checkpoints);
  spdlog::info("checkpoint {}", where.string());
}

void load_trained_state(nn::CausalLM& model, const formats::CheckpointData& checkpoint, const RunConfig& config,
                        const std::string& source) {
  load_parameters(model, checkpoint.model, source);
  load_attention_state(model, checkpoint.attention);
  set_feature_epochs(model, redraw_intervals(config), checkpoint.step);
}

void load_parameters(nn::CausalLM& model, const std::map<std::string, Tensor>& saved, const std::string& source) {
  NoGradGuard no_grad;
  auto params = model.named_parameters();
  for (auto& [name, p] : params) {
    auto it = saved.find(name);
    DARK_CHECK(it != saved.end(), source, ": parameter '", name, "' is missing");
    const Tensor& t = it->second;
    DARK_CHECK(t.shape() == p->shape(), source, ": parameter '", name, "' has shape ", shape_str(t.shape()),
               ", the model expects ", shape_str(p->shape()));
    DARK_CHECK(t.dtype() == p->dtype(), source, ": parameter '", name, "' is ", dtype_name(t.dtype()),
               ", the model expects ", dtype_name(p->dtype()));
    p->copy_(t);
  }
  DARK_CHECK(saved.size() == params.size(), source, ": holds ", saved.size(), " tensors, the model has ",
             params.size(), " parameters");
}

}  // namespace dark::train
