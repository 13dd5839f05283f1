// Data-parallel gradient reduction, ZeRO-1 and cross-rank checks (see data_parallel.h).
#include "train/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string_view>

#include "autograd/grad_binding.h"
#include "core/hash.h"

namespace dark::train {

// The gradient buckets: contiguous ranges of the flat gradient buffer that together cover it,
// each with the parameters (buffer entries) that must be final before its all-reduce starts.
struct DataParallel::Buckets {
  struct Bucket {
    std::int64_t begin = 0, end = 0;  // range of the flat buffer
    int entries = 0;                  // parameters in it
    int pending = 0;                  // of those, not yet final in the armed backward
    dist::Work work;                  // its all-reduce, once started
    bool started = false;
  };
  dist::Communicator* comm = nullptr;
  Tensor grads;                  // the flat gradient buffer
  std::vector<Bucket> buckets;   // in launch order: highest offsets first
  std::vector<int> bucket_of;    // per buffer entry
  bool armed = false;            // the current backward is the step's last

  // Buckets of about bucket_mb, formed from the last buffer entry backwards (backward
  // finishes parameters roughly in reverse buffer order). The first bucket formed ends at
  // the buffer's end (its padding included) and the last begins at 0: together they cover
  // the buffer, so the all-reduces leave no gradient out.
  void form(const nn::ParameterBuffer& params, double bucket_mb) {
    const auto& entries = params.entries();
    const auto limit = static_cast<std::int64_t>(bucket_mb * 1024 * 1024 / 4);  // f32 gradients
    bucket_of.assign(entries.size(), 0);
    Bucket current;
    current.end = params.numel();
    for (std::size_t i = entries.size(); i-- > 0;) {
      bucket_of[i] = static_cast<int>(buckets.size());
      ++current.entries;
      current.begin = i == 0 ? 0 : entries[i].offset;
      if (current.end - current.begin >= limit || i == 0) {
        buckets.push_back(current);
        current = {};
        current.end = entries[i].offset;
      }
    }
  }

  void start(Bucket& b) {
    b.work = comm->all_reduce_async(core::slice(grads, 0, b.begin, b.end), dist::ReduceOp::sum);
    b.started = true;
  }
  // A parameter's gradient is final in the armed backward: start its bucket when complete.
  void ready(std::size_t entry) {
    if (!armed) return;
    Bucket& b = buckets[static_cast<std::size_t>(bucket_of[entry])];
    if (--b.pending == 0) start(b);
  }
};

DataParallel::DataParallel(dist::Communicator& comm, nn::ParameterBuffer& params, const DistributedConfig& config)
    : comm_(comm), params_(params), zero_stage_(config.zero_stage), buckets_(std::make_shared<Buckets>()) {
  DARK_CHECK(params.shard_size() * comm.world_size() == params.numel(),
             "DataParallel: the parameter buffer is split for ", params.numel() / params.shard_size(),
             " ranks, the world has ", comm.world_size());
  DARK_CHECK(params.grads().device() == comm.device(), "DataParallel: the gradients are on ",
             params.grads().device().to_string(), ", the ", enum_name(comm.backend()), " communicator serves ",
             comm.device().to_string());
  buckets_->comm = &comm;
  buckets_->grads = params.grads();
  if (zero_stage_ == 0) {
    buckets_->form(params, config.bucket_mb);
    // The hooks hold the buckets weakly: a model that outlives this object stops reporting.
    const std::weak_ptr<Buckets> weak = buckets_;
    const auto& entries = params.entries();
    for (std::size_t i = 0; i < entries.size(); ++i)
      on_grad_ready(*entries[i].param, [weak, i] {
        if (const auto s = weak.lock()) s->ready(i);
      });
  }
}

DataParallel::~DataParallel() = default;

int DataParallel::rank() const { return comm_.rank(); }
int DataParallel::world_size() const { return comm_.world_size(); }
std::size_t DataParallel::num_buckets() const { return buckets_->buckets.size(); }

nn::FlatRange DataParallel::optimizer_shard() const {
  return zero_stage_ == 1 ? params_.shard(comm_.rank()) : nn::FlatRange{0, params_.numel()};
}

void DataParallel::arm() {
  Buckets& s = *buckets_;
  s.armed = true;
  for (auto& b : s.buckets) b.pending = b.entries, b.started = false, b.work = dist::Work();
}

double DataParallel::finish_gradients() {
  const auto t0 = std::chrono::steady_clock::now();
  Buckets& s = *buckets_;
  if (zero_stage_ == 1) {
    const nn::FlatRange mine = params_.shard(comm_.rank());
    comm_.reduce_scatter(params_.grads(), core::slice(params_.grads(), 0, mine.begin, mine.end));
  } else {
    // Buckets whose parameters the graph did not reach start now, in bucket order: which
    // ones those are depends only on the graph's shape, so it is the same on every rank.
    for (auto& b : s.buckets)
      if (!b.started) s.start(b);
    for (auto& b : s.buckets) b.work.wait();
  }
  s.armed = false;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Tensor DataParallel::grad_sq_norm() const {
  if (zero_stage_ == 0) return params_.grad_sq_norm();
  const Tensor mine = params_.grad_sq_chunks(params_.shard(comm_.rank()));
  const Tensor all = Tensor::zeros({mine.numel() * comm_.world_size()}, mine.dtype(), mine.device());
  comm_.all_gather(mine, all);
  return nn::ParameterBuffer::sum_chunks(all);
}

void DataParallel::after_update() {
  if (zero_stage_ == 0) return;
  const nn::FlatRange mine = params_.shard(comm_.rank());
  comm_.all_gather(core::slice(params_.values(), 0, mine.begin, mine.end), params_.values());
}

void DataParallel::sum(const Tensor& t) const { comm_.all_reduce(t, dist::ReduceOp::sum); }

Tensor DataParallel::gather_shard(const Tensor& shard_values) const {
  const Tensor whole =
      Tensor::zeros({shard_values.numel() * comm_.world_size()}, shard_values.dtype(), shard_values.device());
  comm_.all_gather(shard_values.contiguous(), whole);
  return whole;
}

std::int64_t micro_batch_index(std::int64_t step, int rank, int world_size, int grad_accum, int micro) {
  const std::int64_t per_step = static_cast<std::int64_t>(world_size) * grad_accum;
  return step * per_step + static_cast<std::int64_t>(rank) * grad_accum + micro;
}

void check_same_on_every_rank(dist::Communicator& comm, const std::vector<std::pair<std::string, Tensor>>& tensors,
                              const std::string& what) {
  const int world = comm.world_size();
  if (world == 1) return;
  std::vector<std::int64_t> hashes;
  for (const auto& [name, t] : tensors) {
    const Tensor host = t.to(Device::cpu()).contiguous();
    const std::string_view bytes(static_cast<const char*>(host.raw_data()),
                                 static_cast<std::size_t>(host.numel()) * dtype_size(host.dtype()));
    hashes.push_back(static_cast<std::int64_t>(fnv1a64(bytes)));
  }
  const auto n = static_cast<std::int64_t>(hashes.size());
  if (n == 0) return;
  const Tensor mine = Tensor::from_vector<std::int64_t>(hashes, {n});
  const Tensor all = Tensor::zeros({n * world}, DType::i64, Device::cpu());
  comm.all_gather(mine, all);
  const std::vector<std::int64_t> v = all.to_vector<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<int> differing;
    for (int r = 1; r < world; ++r)
      if (v[static_cast<std::size_t>(r * n + i)] != v[static_cast<std::size_t>(i)]) differing.push_back(r);
    if (differing.empty()) continue;
    std::string ranks;
    for (int r : differing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    throw Error(str(what, " differ across ranks: '", tensors[static_cast<std::size_t>(i)].first, "' on rank(s) ", ranks,
                    " is not rank 0's (the first of ", n, " tensors compared to differ); every rank must build the "
                    "same model from the same config and seed"));
  }
}

}  // namespace dark::train
