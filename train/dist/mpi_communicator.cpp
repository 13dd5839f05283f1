// The mpi backend (see mpi_communicator.h): argument checks on the caller's thread, MPI calls
// on the communication thread, one job per collective in a FIFO queue.
#include "train/dist/mpi_communicator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "core/bfloat16.h"
#include "train/dist/mpi_check.h"
#include "train/dist/mpi_runtime.h"

namespace dark::dist {
namespace {

constexpr std::int64_t kDefaultMaxChunkBytes = std::int64_t{1} << 30;

// Waking a sleeping thread takes several microseconds (each way: caller -> communication
// thread -> caller), as long as a small collective itself. So both sides poll briefly,
// yielding the core, before they sleep: the thread for the next job, a waiter for its job.
constexpr auto kSpinBeforeSleeping = std::chrono::microseconds(20);

template <class Ready>
bool spin_until(Ready ready) {
  const auto end = std::chrono::steady_clock::now() + kSpinBeforeSleeping;
  do {
    if (ready()) return true;
    std::this_thread::yield();
  } while (std::chrono::steady_clock::now() < end);
  return ready();
}

// bf16 reductions: MPI has no bf16 type, so 2-byte elements with user-defined operations
// that compute in float and round like BFloat16 (to nearest even). Max keeps a NaN.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = BFloat16::from_float(BFloat16::to_float(a[i]) + BFloat16::to_float(b[i]));
}

void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = BFloat16::to_float(a[i]);
    if (x > BFloat16::to_float(b[i]) || x != x) b[i] = a[i];
  }
}

struct Bf16Ops {
  MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL;
};

// Created once, on the first communicator's construction (before its thread starts).
const Bf16Ops& bf16_ops() {
  static const Bf16Ops ops = [] {
    Bf16Ops o;
    DARK_MPI_CHECK(MPI_Op_create(&bf16_sum, /*commute=*/1, &o.sum));
    DARK_MPI_CHECK(MPI_Op_create(&bf16_max, /*commute=*/1, &o.max));
    return o;
  }();
  return ops;
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::bf16: return MPI_UINT16_T;  // reduced by bf16_ops()
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
  }
  throw Error(str("mpi backend: no MPI type for dtype ", dtype_name(dtype)));
}

MPI_Op mpi_op(ReduceOp op, DType dtype) {
  if (dtype == DType::bf16) return op == ReduceOp::sum ? bf16_ops().sum : bf16_ops().max;
  return op == ReduceOp::sum ? MPI_SUM : MPI_MAX;
}

// Calls fn(first, count) over [0, total) in pieces of at most max_count elements.
template <class Fn>
void for_each_chunk(std::int64_t total, std::int64_t max_count, Fn fn) {
  for (std::int64_t first = 0; first < total; first += max_count)
    fn(first, static_cast<int>(std::min(max_count, total - first)));
}

// What a job's MPI calls need to know about one tensor.
struct Buffer {
  char* base;
  std::size_t element_size;
  char* at(std::int64_t element) const { return base + element * static_cast<std::int64_t>(element_size); }
};

Buffer buffer_of(const Tensor& t) { return {static_cast<char*>(t.raw_data()), dtype_size(t.dtype())}; }

}  // namespace

// ---------------------------------------------------------------- jobs

// What the communication thread is running, for the timeout message of another job.
struct MpiCommunicator::Progress {
  std::mutex mutex;
  const void* job = nullptr;
  std::string text;
};

struct MpiCommunicator::Job final : Work::State {
  CollectiveInfo info;
  std::function<void()> run;  // the MPI calls; holds the tensors until it has run
  int rank = 0;
  double timeout_s = 0;
  std::shared_ptr<Progress> progress;

  mutable std::mutex mutex;
  std::condition_variable finished_changed;
  std::atomic<bool> finished{false};  // set under `mutex`; read without it to spin
  std::exception_ptr error;

  // Blocks until the job ran; past timeout_s, ends the job (collective_timed_out).
  void await() {
    if (spin_until([this] { return finished.load(); })) return;
    std::unique_lock<std::mutex> lock(mutex);
    if (wait_for_seconds(finished_changed, lock, timeout_s, [this] { return finished.load(); })) return;
    lock.unlock();
    std::string detail;
    {
      std::lock_guard<std::mutex> running(progress->mutex);
      if (progress->job && progress->job != this)
        detail = "the communication thread is still in the " + progress->text + " issued before it";
    }
    collective_timed_out(rank, info, timeout_s, detail);
  }
  void wait() override {
    await();
    if (error) std::rethrow_exception(error);  // finished: no lock needed any more
  }
  bool done() const override { return finished; }
  void finish(std::exception_ptr failure) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      error = std::move(failure);  // before `finished`: a spinning waiter reads it without the lock
      finished = true;
    }
    finished_changed.notify_all();
  }
};

// ---------------------------------------------------------------- the communicator

MpiCommunicator::MpiCommunicator(double timeout_s)
    : timeout_s_(timeout_s), max_chunk_bytes_(kDefaultMaxChunkBytes), progress_(std::make_shared<Progress>()) {
  check_timeout(timeout_s);
  mpi::ensure_initialized();
  DARK_CHECK(mpi::thread_level() >= MPI_THREAD_MULTIPLE || mpi::finalize_hook_count() == 0, "darkformer: rank ",
             mpi::world_rank(), ": MPI provides only ", mpi::thread_level_name(mpi::thread_level()),
             ", so only one mpi communicator may live at a time (two communication threads would call MPI at once)");
  DARK_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
  DARK_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  DARK_MPI_CHECK(MPI_Comm_size(comm_, &world_));
  local_rank_ = mpi::local_rank();
  bf16_ops();
  finalize_hook_ = mpi::add_finalize_hook([this] { shutdown(); });
  thread_ = std::thread([this] { thread_main(); });
}

MpiCommunicator::~MpiCommunicator() { shutdown(); }

std::string MpiCommunicator::describe() const {
  return str("mpi rank ", rank_, " of ", world_, " (local ", local_rank_, ") on cpu, timeout ", timeout_s_, " s, ",
             mpi::thread_level_name(mpi::thread_level()));
}

std::int64_t MpiCommunicator::max_chunk_elements(DType dtype) const {
  const std::int64_t elements = max_chunk_bytes_ / static_cast<std::int64_t>(dtype_size(dtype));
  return std::clamp<std::int64_t>(elements, 1, INT_MAX);
}

void MpiCommunicator::set_max_chunk_bytes(std::int64_t bytes) {
  DARK_CHECK(bytes > 0, "set_max_chunk_bytes: ", bytes, " is not a positive byte count");
  max_chunk_bytes_ = bytes;
}

Work MpiCommunicator::enqueue(const CollectiveInfo& info, std::function<void()> run) {
  auto job = std::make_shared<Job>();
  job->info = info;
  job->run = std::move(run);
  job->rank = rank_;
  job->timeout_s = timeout_s_;
  job->progress = progress_;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    DARK_CHECK(!stopping_, "mpi communicator: ", info.text(), " issued after the communicator was stopped "
                           "(dist::finalize)");
    queue_.push_back(job);
    ++queued_;
  }
  queue_changed_.notify_one();
  return Work(job);
}

void MpiCommunicator::thread_main() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      spin_until([this] { return queued_.load() > 0; });
      std::unique_lock<std::mutex> lock(mutex_);
      queue_changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and drained
      job = std::move(queue_.front());
      queue_.pop_front();
      --queued_;
    }
    {
      std::lock_guard<std::mutex> lock(progress_->mutex);
      progress_->job = job.get();
      progress_->text = job->info.text();
    }
    std::exception_ptr failure;
    try {
      mpi::CallScope in_mpi;
      job->run();
    } catch (...) {
      failure = std::current_exception();
    }
    job->run = nullptr;  // releases the job's tensors
    {
      std::lock_guard<std::mutex> lock(progress_->mutex);
      progress_->job = nullptr;
    }
    job->finish(std::move(failure));
  }
}

void MpiCommunicator::shutdown() {
  if (!thread_.joinable()) return;
  std::shared_ptr<Job> last;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!queue_.empty()) last = queue_.back();
    stopping_ = true;
  }
  queue_changed_.notify_all();
  if (last) last->await();  // the queue runs in order: the last job done means all are
  thread_.join();
  MPI_Comm_free(&comm_);  // no throwing here (destructor); a failure would change nothing
  mpi::remove_finalize_hook(finalize_hook_);
}

// ---------------------------------------------------------------- the collectives

Work MpiCommunicator::all_reduce_async(const Tensor& t, ReduceOp op) {
  check_all_reduce(t, device());
  const std::int64_t count = t.numel();
  const std::int64_t chunk = max_chunk_elements(t.dtype());
  const MPI_Datatype type = mpi_type(t.dtype());
  const MPI_Op mop = mpi_op(op, t.dtype());
  const Buffer buf = buffer_of(t);
  return enqueue({CollectiveKind::all_reduce, count, t.dtype()}, [=, this, keep = t] {
    for_each_chunk(count, chunk, [&](std::int64_t first, int n) {
      DARK_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf.at(first), n, type, mop, comm_));
    });
  });
}

Work MpiCommunicator::reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) {
  const BlockLayout layout = check_reduce_scatter(in, out, rank_, world_, device());
  const std::int64_t n = layout.n;
  const std::int64_t chunk = max_chunk_elements(in.dtype());
  const MPI_Datatype type = mpi_type(in.dtype());
  const MPI_Op mop = mpi_op(op, in.dtype());
  const Buffer src = buffer_of(in), dst = buffer_of(out);
  return enqueue({CollectiveKind::reduce_scatter, in.numel(), in.dtype()}, [=, this, keep = in, keep_out = out] {
    if (n == 0) return;
    if (n * world_ <= chunk) {
      if (!layout.in_place) {
        DARK_MPI_CHECK(MPI_Reduce_scatter_block(src.base, dst.base, static_cast<int>(n), type, mop, comm_));
        return;
      }
      // In place, MPI leaves block `rank`'s result at the start of the buffer.
      DARK_MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, src.base, static_cast<int>(n), type, mop, comm_));
      if (rank_ != 0) std::memcpy(dst.base, src.base, n * src.element_size);
      return;
    }
    // Too large for one call: per chunk of the block, one reduce to each block's rank.
    for_each_chunk(n, chunk, [&](std::int64_t first, int count) {
      for (int root = 0; root < world_; ++root) {
        const char* send = src.at(root * n + first);
        if (root != rank_)
          DARK_MPI_CHECK(MPI_Reduce(send, nullptr, count, type, mop, root, comm_));
        else
          DARK_MPI_CHECK(MPI_Reduce(layout.in_place ? MPI_IN_PLACE : send, dst.at(first), count, type, mop, root, comm_));
      }
    });
  });
}

Work MpiCommunicator::all_gather_async(const Tensor& in, const Tensor& out) {
  const BlockLayout layout = check_all_gather(in, out, rank_, world_, device());
  const std::int64_t n = layout.n;
  const std::int64_t chunk = max_chunk_elements(in.dtype());
  const MPI_Datatype type = mpi_type(in.dtype());
  const Buffer src = buffer_of(in), dst = buffer_of(out);
  return enqueue({CollectiveKind::all_gather, out.numel(), in.dtype()}, [=, this, keep = in, keep_out = out] {
    if (n == 0) return;
    if (n * world_ <= chunk) {
      DARK_MPI_CHECK(MPI_Allgather(layout.in_place ? MPI_IN_PLACE : src.base, static_cast<int>(n), type, dst.base,
                                   static_cast<int>(n), type, comm_));
      return;
    }
    // Too large for one call: this rank's block in place, then per chunk one broadcast from
    // each block's rank.
    if (!layout.in_place) std::memcpy(dst.at(rank_ * n), src.base, n * src.element_size);
    for_each_chunk(n, chunk, [&](std::int64_t first, int count) {
      for (int root = 0; root < world_; ++root)
        DARK_MPI_CHECK(MPI_Bcast(dst.at(root * n + first), count, type, root, comm_));
    });
  });
}

Work MpiCommunicator::broadcast_async(const Tensor& t, int root) {
  check_broadcast(t, root, world_, device());
  const std::int64_t count = t.numel();
  const std::int64_t chunk = max_chunk_elements(t.dtype());
  const MPI_Datatype type = mpi_type(t.dtype());
  const Buffer buf = buffer_of(t);
  return enqueue({CollectiveKind::broadcast, count, t.dtype()}, [=, this, keep = t] {
    for_each_chunk(count, chunk, [&](std::int64_t first, int n) {
      DARK_MPI_CHECK(MPI_Bcast(buf.at(first), n, type, root, comm_));
    });
  });
}

void MpiCommunicator::barrier() {
  enqueue({CollectiveKind::barrier, 0, DType::f32}, [this] { DARK_MPI_CHECK(MPI_Barrier(comm_)); }).wait();
}

}  // namespace dark::dist
