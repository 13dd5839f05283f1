// What the backends of communicator.h share (internal to train/dist/): the Work state they
// derive from, the argument checks every collective runs before it is issued (so a bad call
// throws on every rank alike, before any rank communicates), the one-line description of a
// collective that errors and the timeout message name, and the wait with a deadline.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "core/dtype.h"
#include "train/dist/communicator.h"

namespace dark::dist {

// A backend's collective in flight. wait() blocks until it has finished (its own deadline
// inside) and rethrows its failure; done() never blocks.
struct Work::State {
  virtual ~State() = default;
  virtual void wait() = 0;
  virtual bool done() const = 0;
};

// A Work that has finished already (the single backend; every collective there is local).
Work finished_work();

enum class CollectiveKind { all_reduce, reduce_scatter, all_gather, broadcast, barrier };

// A collective as messages name it: "all_reduce of 1048576 f32 (4.0 MiB)", "barrier".
// count is the larger side's elements (reduce_scatter's input, all_gather's output).
struct CollectiveInfo {
  CollectiveKind kind = CollectiveKind::barrier;
  std::int64_t count = 0;
  DType dtype = DType::f32;
  std::string text() const;
};

// "4.0 MiB", "512 B".
std::string format_bytes(double bytes);

// The shapes of a sharded collective after its checks: n elements per block, and whether
// it is the in-place form (out is block `rank` of in, or in is block `rank` of out).
struct BlockLayout {
  std::int64_t n = 0;
  bool in_place = false;
};

// Each throws dark::Error naming the collective and the offending tensor unless the
// tensors are defined, contiguous, on `device` and of one dtype, and their sizes fit
// (in = world * out for reduce_scatter, out = world * in for all_gather; in and out
// overlapping only in the in-place form).
void check_all_reduce(const Tensor& t, Device device);
BlockLayout check_reduce_scatter(const Tensor& in, const Tensor& out, int rank, int world, Device device);
BlockLayout check_all_gather(const Tensor& in, const Tensor& out, int rank, int world, Device device);
void check_broadcast(const Tensor& t, int root, int world, Device device);
// timeout_s > 0 (infinity: no limit).
void check_timeout(double timeout_s);

// The end of a collective that did not finish in time: prints one line to stderr,
//   darkformer: rank 1: all_reduce of 1048576 f32 (4.0 MiB) did not finish within 600 s
//   (distributed.timeout_s): another rank died or stopped answering; aborting the job
// (with `detail`, when not empty, before "; aborting"), runs `before_abort` (the nccl
// backend aborts its NCCL communicator there), then abort_job(1).
[[noreturn]] void collective_timed_out(int rank, const CollectiveInfo& what, double timeout_s,
                                       const std::string& detail = "",
                                       const std::function<void()>& before_abort = {});

// Waits on cv until ready() or timeout_s have passed (no limit when infinite, or beyond
// 1e8 s, which a steady_clock duration could not hold); true when ready() holds.
template <class Ready>
bool wait_for_seconds(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, double timeout_s,
                      Ready ready) {
  using namespace std::chrono;
  if (timeout_s > 1e8) {
    cv.wait(lock, ready);
    return true;
  }
  return cv.wait_for(lock, duration_cast<steady_clock::duration>(duration<double>(timeout_s)), ready);
}

}  // namespace dark::dist
