// The nccl backend (see nccl_communicator.h): bootstrap, stream ordering against the
// legacy default stream, and waits with a deadline that watch NCCL's asynchronous errors.
#include "train/dist/nccl_communicator.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "core/cuda/cuda_check.h"
#ifdef DARK_WITH_MPI
#include "train/dist/mpi_check.h"
#include "train/dist/mpi_runtime.h"
#endif

// Throws dark::Error when CALL (an ncclResult_t expression) fails, naming the rank, the call,
// the source line, ncclGetErrorString and NCCL's last error message.
#define DARK_NCCL_CHECK(RANK, CALL)                                                                  \
  do {                                                                                               \
    const ncclResult_t dark_nccl_status_ = (CALL);                                                   \
    if (dark_nccl_status_ != ncclSuccess)                                                            \
      throw ::dark::Error(::dark::dist::nccl_error_message(RANK, #CALL, dark_nccl_status_, __FILE__, __LINE__)); \
  } while (0)

namespace dark::dist {
namespace {

std::string nccl_error_message(int rank, const char* call, ncclResult_t status, const char* file, int line) {
  const char* last = ncclGetLastError(nullptr);
  return str("darkformer: rank ", rank, ": NCCL call ", call, " failed (", file, ":", line, "): ",
             ncclGetErrorString(status), last && *last ? str(" (", last, ")") : std::string());
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
  }
  throw Error(str("nccl backend: no NCCL type for dtype ", dtype_name(dtype)));
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : ncclMax; }

// Makes `index` the current device for its scope without throwing (for destructors).
class QuietDeviceGuard {
 public:
  explicit QuietDeviceGuard(int index) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != index) changed_ = cudaSetDevice(index) == cudaSuccess;
  }
  ~QuietDeviceGuard() {
    if (changed_) (void)cudaSetDevice(previous_);
  }
  QuietDeviceGuard(const QuietDeviceGuard&) = delete;
  QuietDeviceGuard& operator=(const QuietDeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

}  // namespace

// ---------------------------------------------------------------- shared state and jobs

struct NcclCommunicator::Shared {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t default_stream_mark = nullptr;  // recorded on the default stream at each issue
  int rank = 0;
  int device_index = 0;
  double timeout_s = 0;
  std::atomic<bool> aborted{false};

  // ncclCommAbort once (after a timeout or an asynchronous error).
  void abort() {
    if (!aborted.exchange(true)) (void)ncclCommAbort(comm);
  }
  // Throws (after aborting the communicator) when NCCL reports an asynchronous error.
  void check_async_error(const CollectiveInfo& info) {
    ncclResult_t async = ncclSuccess;
    DARK_NCCL_CHECK(rank, ncclCommGetAsyncError(comm, &async));
    if (async == ncclSuccess || async == ncclInProgress) return;
    const std::string message = nccl_error_message(rank, "(asynchronous)", async, __FILE__, __LINE__);
    abort();
    throw Error(str(message, " during ", info.text(), "; the NCCL communicator was aborted"));
  }
  ~Shared() {
    QuietDeviceGuard guard(device_index);
    if (comm && !aborted) (void)ncclCommDestroy(comm);
    if (stream) (void)cudaStreamDestroy(stream);
    if (default_stream_mark) (void)cudaEventDestroy(default_stream_mark);
  }
};

struct NcclCommunicator::Job final : Work::State {
  std::shared_ptr<Shared> shared;
  CollectiveInfo info;
  cudaEvent_t end = nullptr;  // recorded on the NCCL stream after the collective
  std::vector<Tensor> keep;
  std::atomic<bool> finished{false};

  void wait() override {
    if (finished) return;
    cuda::DeviceGuard guard(shared->device_index);
    const auto start = std::chrono::steady_clock::now();
    for (long polls = 0;; ++polls) {
      const cudaError_t query = cudaEventQuery(end);
      if (query == cudaSuccess) break;
      if (query != cudaErrorNotReady) DARK_CUDA_CHECK(query);
      shared->check_async_error(info);
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > shared->timeout_s) {
        Shared* s = shared.get();
        collective_timed_out(s->rank, info, s->timeout_s, "", [s] { s->abort(); });
      }
      if (polls < 1000)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    finished = true;
    keep.clear();
  }
  bool done() const override {
    if (finished) return true;
    QuietDeviceGuard guard(shared->device_index);
    return cudaEventQuery(end) != cudaErrorNotReady;  // an error: wait() would throw at once
  }
  ~Job() override {
    QuietDeviceGuard guard(shared->device_index);
    // Unwaited: the tensors' memory goes back to the caching allocator now, so kernels on
    // the default stream must not reuse it before the collective has ended.
    if (!finished && end) (void)cudaStreamWaitEvent(cudaStreamLegacy, end, 0);
    if (end) (void)cudaEventDestroy(end);
  }
};

// ---------------------------------------------------------------- the communicator

NcclCommunicator::NcclCommunicator(Device device, double timeout_s) : timeout_s_(timeout_s), device_(device) {
  check_timeout(timeout_s);
  DARK_CHECK(device.is_cuda(), "nccl backend: ", device.to_string(), " is not a CUDA device");
  ncclUniqueId id{};
  if (launched_by_mpi()) {
#ifdef DARK_WITH_MPI
    mpi::ensure_initialized();
    rank_ = mpi::world_rank();
    world_ = mpi::world_size();
    local_rank_ = mpi::local_rank();
    device_ = Device::cuda(local_rank_);
    if (rank_ == 0) DARK_NCCL_CHECK(rank_, ncclGetUniqueId(&id));
    DARK_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
#else
    throw Error("nccl backend: this process was started by mpirun, but this build has no MPI to share the "
                "ncclUniqueId between the ranks (configure with -DDARK_USE_MPI=ON)");
#endif
  } else {
    DARK_NCCL_CHECK(rank_, ncclGetUniqueId(&id));
  }
  const int devices = cuda_device_count();
  DARK_CHECK(device_.index < devices, "darkformer: rank ", rank_, ": the nccl backend needs ", device_.to_string(),
             " (local rank ", local_rank_, "), but this host has ", devices,
             " usable CUDA device(s): start at most one rank per GPU on each host");
  cuda::DeviceGuard guard(device_.index);
  shared_ = std::make_shared<Shared>();
  shared_->rank = rank_;
  shared_->device_index = device_.index;
  shared_->timeout_s = timeout_s;
  DARK_NCCL_CHECK(rank_, ncclCommInitRank(&shared_->comm, world_, id, rank_));
  DARK_CUDA_CHECK(cudaStreamCreateWithFlags(&shared_->stream, cudaStreamNonBlocking));
  DARK_CUDA_CHECK(cudaEventCreateWithFlags(&shared_->default_stream_mark, cudaEventDisableTiming));
  barrier_flag_ = Tensor::zeros({1}, DType::i32, device_);
}

NcclCommunicator::~NcclCommunicator() {
  if (!last_) return;
  try {
    last_->wait();
  } catch (const std::exception& e) {  // destructors do not throw; the error was or will be reported by wait()
    std::fprintf(stderr, "darkformer: rank %d: nccl communicator closing: %s\n", rank_, e.what());
  }
}

std::string NcclCommunicator::describe() const {
  return str("nccl rank ", rank_, " of ", world_, " (local ", local_rank_, ") on ", device_.to_string(),
             ", timeout ", timeout_s_, " s, NCCL ", NCCL_MAJOR, ".", NCCL_MINOR, ".", NCCL_PATCH);
}

Work NcclCommunicator::launch(const CollectiveInfo& info, std::initializer_list<Tensor> keep,
                              const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& call) {
  DARK_CHECK(!shared_->aborted, "nccl backend: rank ", rank_, ": ", info.text(),
             " issued after the NCCL communicator was aborted");
  cuda::DeviceGuard guard(device_.index);
  auto job = std::make_shared<Job>();
  job->shared = shared_;
  job->info = info;
  job->keep.assign(keep.begin(), keep.end());
  DARK_CUDA_CHECK(cudaEventCreateWithFlags(&job->end, cudaEventDisableTiming));
  DARK_CUDA_CHECK(cudaEventRecord(shared_->default_stream_mark, cudaStreamLegacy));
  DARK_CUDA_CHECK(cudaStreamWaitEvent(shared_->stream, shared_->default_stream_mark, 0));
  if (info.count > 0) DARK_NCCL_CHECK(rank_, call(shared_->comm, shared_->stream));
  DARK_CUDA_CHECK(cudaEventRecord(job->end, shared_->stream));
  last_ = job;
  return Work(job);
}

Work NcclCommunicator::all_reduce_async(const Tensor& t, ReduceOp op) {
  check_all_reduce(t, device_);
  return launch({CollectiveKind::all_reduce, t.numel(), t.dtype()}, {t}, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(t.raw_data(), t.raw_data(), t.numel(), nccl_type(t.dtype()), nccl_op(op), comm, stream);
  });
}

// In place (out = block `rank` of in) is NCCL's own in-place form.
Work NcclCommunicator::reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) {
  const BlockLayout layout = check_reduce_scatter(in, out, rank_, world_, device_);
  return launch({CollectiveKind::reduce_scatter, in.numel(), in.dtype()}, {in, out},
                [&](ncclComm_t comm, cudaStream_t stream) {
                  return ncclReduceScatter(in.raw_data(), out.raw_data(), layout.n, nccl_type(in.dtype()),
                                           nccl_op(op), comm, stream);
                });
}

// In place (in = block `rank` of out) is NCCL's own in-place form.
Work NcclCommunicator::all_gather_async(const Tensor& in, const Tensor& out) {
  const BlockLayout layout = check_all_gather(in, out, rank_, world_, device_);
  return launch({CollectiveKind::all_gather, out.numel(), in.dtype()}, {in, out},
                [&](ncclComm_t comm, cudaStream_t stream) {
                  return ncclAllGather(in.raw_data(), out.raw_data(), layout.n, nccl_type(in.dtype()), comm, stream);
                });
}

Work NcclCommunicator::broadcast_async(const Tensor& t, int root) {
  check_broadcast(t, root, world_, device_);
  return launch({CollectiveKind::broadcast, t.numel(), t.dtype()}, {t}, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclBroadcast(t.raw_data(), t.raw_data(), t.numel(), nccl_type(t.dtype()), root, comm, stream);
  });
}

// NCCL has no barrier: a one-element all-reduce, waited on by the host, is one.
void NcclCommunicator::barrier() {
  Work work = launch({CollectiveKind::barrier, 1, DType::i32}, {barrier_flag_},
                     [&](ncclComm_t comm, cudaStream_t stream) {
                       return ncclAllReduce(barrier_flag_.raw_data(), barrier_flag_.raw_data(), 1, ncclInt32, ncclSum,
                                            comm, stream);
                     });
  work.wait();
}

}  // namespace dark::dist
