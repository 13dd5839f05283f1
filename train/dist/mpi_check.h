// DARK_MPI_CHECK: every MPI call of train/dist/ goes through it. MPI returns its errors
// (MPI_ERRORS_RETURN is set on every communicator, see mpi_runtime.cpp); a failure throws
// dark::Error naming the call, this process's rank, the source line and MPI_Error_string:
//   darkformer: rank 1: MPI call MPI_Bcast(...) failed (train/dist/x.cpp:12): MPI_ERR_ROOT: invalid root
#pragma once
#include <mpi.h>

#include "core/error.h"
#include "train/dist/mpi_runtime.h"

#define DARK_MPI_CHECK(CALL)                                                                       \
  do {                                                                                             \
    const int dark_mpi_status_ = (CALL);                                                           \
    if (dark_mpi_status_ != MPI_SUCCESS)                                                           \
      throw ::dark::Error(::dark::dist::mpi::error_message(#CALL, dark_mpi_status_, __FILE__, __LINE__)); \
  } while (0)
