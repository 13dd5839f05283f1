// MPI as a process-wide resource (internal to train/dist/; built with DARK_WITH_MPI only):
// initialised at most once, by the first communicator that needs it, with
// MPI_THREAD_MULTIPLE (MPI_THREAD_SERIALIZED accepted); finalized once by dist::finalize();
// aborted by dist::abort_job. Communicators register what must happen before MPI_Finalize
// (draining their communication thread) as finalize hooks.
#pragma once
#include <functional>
#include <string>

namespace dark::dist::mpi {

// Initialises MPI unless done already; throws when it cannot (finalized already, or a
// thread level below MPI_THREAD_SERIALIZED). The environment variable
// DARK_MPI_THREAD_LEVEL=serialized makes it ask for MPI_THREAD_SERIALIZED only, to test the
// fallback on an MPI that has MPI_THREAD_MULTIPLE. A collective over MPI_COMM_WORLD the first time
// (the local rank, when the launcher does not give it): every rank calls it at the same point.
void ensure_initialized();
// MPI initialised by us and not finalized yet.
bool active();

// Valid once initialised; world_rank() is -1 before (messages then say "rank ?").
int world_rank();
int world_size();
int local_rank();  // OMPI_COMM_WORLD_LOCAL_RANK, else the rank among MPI_COMM_TYPE_SHARED peers
int thread_level();
const char* thread_level_name(int level);  // "MPI_THREAD_MULTIPLE", ...

// Marks, for its lifetime, that this thread is inside an MPI call. Under
// MPI_THREAD_SERIALIZED no other thread may call MPI meanwhile, so abort() then exits the
// process instead of calling MPI_Abort.
class CallScope {
 public:
  CallScope();
  ~CallScope();
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
};

// Hooks finalize() runs, in registration order, before MPI_Finalize. The id removes one.
int add_finalize_hook(std::function<void()> hook);
void remove_finalize_hook(int id);
int finalize_hook_count();

// Runs the hooks, then MPI_Finalize; nothing when MPI is not active.
void finalize();
// Ends the job: MPI_Abort(MPI_COMM_WORLD, code) when MPI is active and may be called from
// this thread now; otherwise (MPI_THREAD_SERIALIZED with another thread inside MPI) flushes
// stdout and stderr and std::_Exit(code), and mpirun ends the other ranks. Returns only when
// MPI is not active.
void abort_if_active(int code);

// The message of DARK_MPI_CHECK (mpi_check.h).
std::string error_message(const char* call, int status, const char* file, int line);

}  // namespace dark::dist::mpi
