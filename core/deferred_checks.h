// Index checks that do not make the host wait for the device. A GPU kernel that validates
// indices (gather, scatter_add) flags the first bad position in a device word; outside any
// scope it reads that word back at once and throws the CPU's message (a synchronisation per
// call). While a DeferredChecks scope for that device is open on the thread (the trainer opens
// one per step), the words stay on the device: verdicts() hands them over as one f64 tensor,
// to be read back with the step's other scalars in one transfer, and raise() then throws the
// message of the first failed check. Until then a bad index reads and writes nothing out of
// bounds (gather gives 0 for it, scatter_add skips it). CPU kernels always check at once (it
// costs no synchronisation there): a scope changes nothing on the CPU.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace dark {

class DeferredChecks {
 public:
  explicit DeferredChecks(Device device);
  ~DeferredChecks();
  DeferredChecks(const DeferredChecks&) = delete;
  DeferredChecks& operator=(const DeferredChecks&) = delete;

  // The checks' verdicts so far, (K) f64 on the device: -1 where the check passed, else the
  // first bad position. Undefined when no check was deferred.
  Tensor verdicts() const;
  // Throws the first failed check's message ("gather: index 9 at position 2 is out of range
  // [0, 5)"), given verdicts() read back; does nothing when all passed.
  void raise(const std::vector<double>& verdicts) const;
  // Ends the scope before the object goes: later kernels check at once again, while the
  // checks deferred so far keep their device words. A captured graph's checks (train/
  // step_graph.h) are taken during the capture and read after every launch. The innermost
  // open scope only; closing twice does nothing.
  void close();

  // For kernels: the i64 device word (all ones = no bad position) a check of `index` against
  // [0, n) by `kernel` flags into, or nullptr when no scope for index's device is open on this
  // thread (or the scope is full): then check at once.
  static std::int64_t* slot_for(const char* kernel, const Tensor& index, std::int64_t n);

 private:
  struct Check {
    const char* kernel;
    Tensor index;  // kept for the message
    std::int64_t n;
  };
  static constexpr std::int64_t kCapacity = 256;
  Device device_;
  Tensor slots_;  // (kCapacity) i64 on the device, all ones at the start
  std::vector<Check> checks_;
  DeferredChecks* outer_;
  bool open_ = true;
};

}  // namespace dark
