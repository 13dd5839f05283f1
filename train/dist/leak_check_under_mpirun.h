// For sanitizer builds (-DDARK_SANITIZE=ON): turns LeakSanitizer off in a process started by
// mpirun. Open MPI keeps allocations of its plug-ins until exit and unloads the plug-ins, so
// LeakSanitizer would report them with stacks it cannot follow into (no module name to
// suppress by). AddressSanitizer and UndefinedBehaviorSanitizer still check everything, and
// the processes not started by mpirun (every other test) are still leak-checked.
//
// LeakSanitizer asks the program (__lsan_is_turned_off, exported from the executable by the
// sanitizer build's link options), not a shared library: include this header once, in the
// file of a program's main(), of every program that may run under mpirun.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#include "train/dist/communicator.h"

// Read once, at the leak check at exit; the launcher's environment does not change.
extern "C" int __lsan_is_turned_off() { return dark::dist::launched_by_mpi(); }
#endif
