// MPI as a process-wide resource: initialised once, finalized once, aborted safely. See
// mpi_runtime.h. The state lives in one function-local struct guarded by its mutex (hooks
// and initialisation); the counters abort reads are atomics, as abort may run on any thread.
#include "train/dist/mpi_runtime.h"

#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "train/dist/mpi_check.h"

namespace dark::dist::mpi {
namespace {

struct Runtime {
  std::mutex mutex;
  std::atomic<bool> initialised{false};  // by us
  std::atomic<bool> finalized{false};
  std::atomic<int> rank{-1};
  int size = 0, local_rank = 0, thread_level = MPI_THREAD_SINGLE;
  std::atomic<int> threads_in_mpi{0};
  int next_hook = 0;
  std::vector<std::pair<int, std::function<void()>>> hooks;
};

Runtime& runtime() {
  static Runtime r;
  return r;
}

int local_rank_from_environment() {
  const char* text = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (!text || !*text) text = std::getenv("MPI_LOCALRANKID");  // MPICH's Hydra
  if (!text || !*text) return -1;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return *end == '\0' && value >= 0 ? static_cast<int>(value) : -1;
}

int local_rank_from_mpi() {
  MPI_Comm shared;
  DARK_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared));
  int rank = 0;
  DARK_MPI_CHECK(MPI_Comm_rank(shared, &rank));
  DARK_MPI_CHECK(MPI_Comm_free(&shared));
  return rank;
}

}  // namespace

void ensure_initialized() {
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.initialised) {
    DARK_CHECK(!r.finalized, "darkformer: MPI was finalized already (dist::finalize); a communicator "
                             "cannot be made after it");
    return;
  }
  int already = 0;
  MPI_Initialized(&already);
  DARK_CHECK(!already, "darkformer: MPI was initialised outside train/dist/; let make_communicator "
                       "initialise it (it asks for MPI_THREAD_MULTIPLE)");
  // DARK_MPI_THREAD_LEVEL=serialized asks for less, as an MPI without MPI_THREAD_MULTIPLE
  // would give (the tests of that fallback set it).
  const char* level = std::getenv("DARK_MPI_THREAD_LEVEL");
  const bool serialized = level && std::string_view(level) == "serialized";
  int provided = MPI_THREAD_SINGLE;
  const int status = MPI_Init_thread(nullptr, nullptr, serialized ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE, &provided);
  DARK_CHECK(status == MPI_SUCCESS, "darkformer: MPI_Init_thread failed (error ", status, ")");
  r.initialised = true;
  r.thread_level = provided;
  // Errors come back as return codes (DARK_MPI_CHECK) instead of ending the process.
  DARK_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  int rank = 0;
  DARK_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  DARK_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &r.size));
  r.rank = rank;
  DARK_CHECK(provided >= MPI_THREAD_SERIALIZED, "darkformer: rank ", rank, ": MPI provides only ",
             thread_level_name(provided), "; darkformer's communication thread needs at least "
             "MPI_THREAD_SERIALIZED (Open MPI built with thread support)");
  const int from_env = local_rank_from_environment();
  r.local_rank = from_env >= 0 ? from_env : local_rank_from_mpi();
}

bool active() {
  const Runtime& r = runtime();
  return r.initialised && !r.finalized;
}

int world_rank() { return runtime().rank; }
int world_size() { return runtime().size; }
int local_rank() { return runtime().local_rank; }
int thread_level() { return runtime().thread_level; }

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown MPI thread level";
  }
}

CallScope::CallScope() { ++runtime().threads_in_mpi; }
CallScope::~CallScope() { --runtime().threads_in_mpi; }

int add_finalize_hook(std::function<void()> hook) {
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.hooks.emplace_back(r.next_hook, std::move(hook));
  return r.next_hook++;
}

void remove_finalize_hook(int id) {
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::erase_if(r.hooks, [id](const auto& hook) { return hook.first == id; });
}

int finalize_hook_count() {
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mutex);
  return static_cast<int>(r.hooks.size());
}

void finalize() {
  Runtime& r = runtime();
  if (!active()) return;
  // Hooks stop communicators (and unregister themselves): run them without the lock.
  for (;;) {
    std::function<void()> hook;
    {
      std::lock_guard<std::mutex> lock(r.mutex);
      if (r.hooks.empty()) break;
      hook = std::move(r.hooks.front().second);
      r.hooks.erase(r.hooks.begin());
    }
    hook();
  }
  r.finalized = true;
  DARK_MPI_CHECK(MPI_Finalize());
}

void abort_if_active(int code) {
  Runtime& r = runtime();
  if (!active()) return;
  if (r.thread_level >= MPI_THREAD_MULTIPLE || r.threads_in_mpi == 0) {
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  // MPI_THREAD_SERIALIZED with the communication thread inside MPI (or MPI_Abort returned):
  // exit without MPI; mpirun ends a job one of whose processes exited non-zero.
  std::fprintf(stderr, "darkformer: rank %d: exiting with %d without MPI_Abort (MPI gives %s and another thread "
               "is inside MPI); mpirun ends the other ranks\n", r.rank.load(), code, thread_level_name(r.thread_level));
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

std::string error_message(const char* call, int status, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(status, text, &length) != MPI_SUCCESS) std::snprintf(text, sizeof text, "error %d", status);
  const int rank = world_rank();
  return str("darkformer: rank ", rank >= 0 ? std::to_string(rank) : std::string("?"), ": MPI call ", call,
             " failed (", file, ":", line, "): ", text);
}

}  // namespace dark::dist::mpi
