// The backend-independent half of communicator.h: Work, the choice of backend
// (make_communicator, launched_by_mpi), the process end (finalize, abort_job) and the
// helpers of collective.h that every backend's collectives run through.
#include "train/dist/communicator.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "train/dist/collective.h"
#include "train/dist/single_communicator.h"
#ifdef DARK_WITH_MPI
#include "train/dist/mpi_communicator.h"
#include "train/dist/mpi_runtime.h"
#endif
#ifdef DARK_WITH_NCCL
#include "train/dist/nccl_communicator.h"
#endif

namespace dark::dist {
namespace {

const char* kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::broadcast: return "broadcast";
    case CollectiveKind::barrier: return "barrier";
  }
  return "?";
}

const char* getenv_nonempty(const char* name) {
  const char* value = std::getenv(name);
  return value && *value ? value : nullptr;
}

// The job's size as its launcher announces it, or -1 when it does not say.
int launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* text = getenv_nonempty(name)) return std::atoi(text);
  return -1;
}

void check_tensor(const char* what, const char* role, const Tensor& t, Device device) {
  DARK_CHECK(t.defined(), what, ": ", role, " is an undefined tensor");
  DARK_CHECK(t.is_contiguous(), what, ": ", role, " ", t.describe(), " is not contiguous");
  DARK_CHECK(t.device() == device, what, ": ", role, " ", t.describe(),
             " is not on the communicator's device ", device.to_string());
}

void check_same_dtype(const char* what, const Tensor& in, const Tensor& out) {
  DARK_CHECK(in.dtype() == out.dtype(), what, ": in ", in.describe(), " and out ", out.describe(),
             " differ in dtype");
}

// The element ranges of a and b (same dtype) in their shared storage: [begin, end).
bool overlap(const Tensor& a, const Tensor& b) {
  if (!a.shares_storage(b) || a.numel() == 0 || b.numel() == 0) return false;
  return a.offset() < b.offset() + b.numel() && b.offset() < a.offset() + a.numel();
}

// Shared by reduce_scatter (whole = in, block = out) and all_gather (whole = out, block = in).
BlockLayout check_blocks(const char* what, const char* whole_role, const Tensor& whole,
                         const char* block_role, const Tensor& block, int rank, int world) {
  const std::int64_t n = block.numel();
  DARK_CHECK(whole.numel() == n * world, what, ": ", whole_role, " ", whole.describe(), " has ",
             whole.numel(), " elements; it must have world_size (", world, ") x ", block_role,
             "'s ", n, " = ", n * world);
  BlockLayout layout{n, false};
  if (overlap(whole, block)) {
    layout.in_place = block.offset() == whole.offset() + rank * n;
    DARK_CHECK(layout.in_place, what, ": ", block_role, " overlaps ", whole_role,
               " but is not its block ", rank, " (elements [", rank * n, ", ", (rank + 1) * n,
               ")), the only overlap allowed (in place)");
  }
  return layout;
}

}  // namespace

// ---------------------------------------------------------------- Work

void Work::wait() {
  if (!state_) return;
  const std::shared_ptr<State> state = std::move(state_);  // a second wait returns at once
  state->wait();
}

bool Work::done() const { return !state_ || state_->done(); }

Work finished_work() { return Work(); }

// ---------------------------------------------------------------- helpers of collective.h

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) bytes /= 1024, ++unit;
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return text;
}

std::string CollectiveInfo::text() const {
  if (kind == CollectiveKind::barrier) return kind_name(kind);
  return str(kind_name(kind), " of ", count, " ", dtype_name(dtype), " (",
             format_bytes(static_cast<double>(count) * static_cast<double>(dtype_size(dtype))), ")");
}

void check_all_reduce(const Tensor& t, Device device) { check_tensor("all_reduce", "tensor", t, device); }

BlockLayout check_reduce_scatter(const Tensor& in, const Tensor& out, int rank, int world, Device device) {
  check_tensor("reduce_scatter", "in", in, device);
  check_tensor("reduce_scatter", "out", out, device);
  check_same_dtype("reduce_scatter", in, out);
  return check_blocks("reduce_scatter", "in", in, "out", out, rank, world);
}

BlockLayout check_all_gather(const Tensor& in, const Tensor& out, int rank, int world, Device device) {
  check_tensor("all_gather", "in", in, device);
  check_tensor("all_gather", "out", out, device);
  check_same_dtype("all_gather", in, out);
  return check_blocks("all_gather", "out", out, "in", in, rank, world);
}

void check_broadcast(const Tensor& t, int root, int world, Device device) {
  check_tensor("broadcast", "tensor", t, device);
  DARK_CHECK(root >= 0 && root < world, "broadcast: root ", root, " is not a rank of this world of ", world);
}

void check_timeout(double timeout_s) {
  DARK_CHECK(timeout_s > 0, "distributed.timeout_s must be > 0 seconds (infinity: no limit), got ", timeout_s);
}

void collective_timed_out(int rank, const CollectiveInfo& what, double timeout_s, const std::string& detail,
                          const std::function<void()>& before_abort) {
  std::fprintf(stderr,
               "darkformer: rank %d: %s did not finish within %g s (distributed.timeout_s): another rank "
               "died or stopped answering%s%s; aborting the job\n",
               rank, what.text().c_str(), timeout_s, detail.empty() ? "" : "; ", detail.c_str());
  std::fflush(stderr);
  if (before_abort) before_abort();
  abort_job(1);
}

// ---------------------------------------------------------------- choosing a backend

bool launched_by_mpi() {
  return getenv_nonempty("OMPI_COMM_WORLD_SIZE") || getenv_nonempty("PMIX_RANK") || getenv_nonempty("PMI_SIZE");
}

int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* text = getenv_nonempty(name)) return std::atoi(text);
  return -1;
}

std::unique_ptr<Communicator> make_communicator(BackendKind backend, Device device, double timeout_s) {
  check_timeout(timeout_s);
  const bool under_mpirun = launched_by_mpi();
  const bool automatic = backend == BackendKind::automatic;
  if (automatic)
    backend = !under_mpirun ? BackendKind::single : device.is_cuda() ? BackendKind::nccl : BackendKind::mpi;
  // How messages name the choice: "distributed.backend = mpi" or "... = auto (mpi: ...)".
  const std::string chosen = automatic ? str("distributed.backend = auto (", enum_name(backend), ": a ",
                                             device.is_cuda() ? "CUDA" : "CPU", " run under mpirun)")
                                       : str("distributed.backend = ", enum_name(backend));
  switch (backend) {
    case BackendKind::automatic:
    case BackendKind::single: {
      const int world = launcher_world_size();
      DARK_CHECK(world <= 1, chosen, ", but this process is one of ", world,
                 " ranks started by mpirun: each would train alone. Use auto (or mpi for the CPU, nccl "
                 "for CUDA), or start one process");
      return std::make_unique<SingleCommunicator>(device);
    }
    case BackendKind::mpi:
#ifdef DARK_WITH_MPI
      DARK_CHECK(under_mpirun, chosen, ", but this process was not started by mpirun (no OMPI_COMM_WORLD_SIZE, "
                 "PMIX_RANK or PMI_SIZE in its environment): start it with `mpirun -np N darkformer ...`, or use "
                 "backend auto or single");
      DARK_CHECK(device.is_cpu(), chosen, " moves CPU tensors, but the run's device is ", device.to_string(),
                 ": use nccl (or auto) for CUDA devices");
      return std::make_unique<MpiCommunicator>(timeout_s);
#else
      throw Error(str(chosen, ", but this build has no MPI (configure with -DDARK_USE_MPI=ON; Debian packages "
                      "libopenmpi-dev openmpi-bin: scripts/install-deps.sh)"));
#endif
    case BackendKind::nccl:
#ifdef DARK_WITH_NCCL
      DARK_CHECK(device.is_cuda(), chosen, " moves CUDA tensors, but the run's device is ", device.to_string(),
                 ": use mpi (or auto) for the CPU");
      return std::make_unique<NcclCommunicator>(device, timeout_s);
#else
      throw Error(str(chosen, ", but this build has no NCCL (configure with -DDARK_USE_CUDA=ON "
                      "-DDARK_USE_NCCL=ON; NCCL comes with the CUDA toolkit or as libnccl-dev)"));
#endif
  }
  throw Error("make_communicator: unknown backend");
}

// ---------------------------------------------------------------- process end

void finalize() {
#ifdef DARK_WITH_MPI
  mpi::finalize();
#endif
}

void abort_job(int code) {
  std::cout.flush();
  std::cerr.flush();
#ifdef DARK_WITH_MPI
  mpi::abort_if_active(code);  // returns only when MPI is not active
#endif
  std::exit(code);
}

}  // namespace dark::dist
