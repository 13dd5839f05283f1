// Kernel dispatch: one table per kernel, keyed by device type and dtype. Kernel files
// fill the tables through DARK_REGISTER_KERNEL at load time; a missing entry is an error
// naming kernel, device and dtype. Nothing falls back or casts silently.
#pragma once
#include <type_traits>
#include <utility>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/kernel_profile.h"

namespace dark {

class Tensor;

namespace capture_detail {
// While a device graph captures on this thread (core/device_graph.h), the tensors its kernels
// are called with are kept alive with the graph unless the capture allocated them: each
// launch uses their memory again, so a cache that lets go of one (RoPE's tables, when
// decoding walks positions) must not free it under the graph.
bool capturing();
void keep(const Tensor& t);
template <class Arg>
void keep_if_tensor(const Arg& arg) {
  if constexpr (std::is_same_v<std::decay_t<Arg>, Tensor>) keep(arg);
}
}  // namespace capture_detail

template <class Fn>
class KernelCall;

// A kernel about to be called: calls it, timed when a kernel profile is alive
// (core/kernel_profile.h), its tensors kept by the graph a capture is recording.
template <class R, class... Args>
class KernelCall<R(Args...)> {
 public:
  KernelCall(R (*fn)(Args...), const char* name, DeviceType device) : fn_(fn), name_(name), device_(device) {}
  R operator()(Args... args) const {
    if (capture_detail::capturing()) (capture_detail::keep_if_tensor(args), ...);
    if (!KernelProfile::active()) return fn_(std::forward<Args>(args)...);
    profile_detail::Work work;
    (profile_detail::count(work, args), ...);
    const profile_detail::KernelTimer timer(name_, device_, work);
    return fn_(std::forward<Args>(args)...);
  }

 private:
  R (*fn_)(Args...);
  const char* name_;
  DeviceType device_;
};

template <class Fn>
class KernelTable {
 public:
  explicit KernelTable(const char* name) : name_(name) {}

  // The entry for (device, dtype), to be called at once; an error when there is none.
  KernelCall<Fn> get(DeviceType device, DType dtype) const {
    Fn* fn = table_[static_cast<int>(device)][static_cast<int>(dtype)];
    DARK_CHECK(fn != nullptr, name_, ": no kernel for ", device_type_name(device), "/",
               dtype_name(dtype));
    return KernelCall<Fn>(fn, name_, device);
  }
  bool has(DeviceType device, DType dtype) const {
    return table_[static_cast<int>(device)][static_cast<int>(dtype)] != nullptr;
  }
  // The registered function itself, or nullptr (tests compare entries with it).
  Fn* find(DeviceType device, DType dtype) const { return table_[static_cast<int>(device)][static_cast<int>(dtype)]; }
  // Registers fn once: a second kernel for the same entry is a link-time mistake (two files,
  // or two libraries, defining it), and which one ran would depend on load order.
  void set(DeviceType device, DType dtype, Fn* fn) {
    Fn*& entry = table_[static_cast<int>(device)][static_cast<int>(dtype)];
    DARK_CHECK(entry == nullptr, name_, ": a second kernel registered for ", device_type_name(device), "/",
               dtype_name(dtype));
    entry = fn;
  }
  // Replaces the entry on purpose (the CUDA emulator's kernels, when a test installs it).
  void replace(DeviceType device, DType dtype, Fn* fn) { table_[static_cast<int>(device)][static_cast<int>(dtype)] = fn; }
  const char* name() const { return name_; }

 private:
  const char* name_;
  Fn* table_[kNumDeviceTypes][kNumDTypes] = {};
};

}  // namespace dark

// Declares `kernels::NAME()`, the table of kernel NAME with function type SIGNATURE. One
// table per process: default visibility keeps it one even in a library built with hidden
// symbols (the CUDA emulator, which fills the cuda entries).
#define DARK_DECLARE_KERNEL(NAME, SIGNATURE)                                       \
  namespace kernels {                                                              \
  using NAME##_fn = SIGNATURE;                                                     \
  __attribute__((visibility("default"))) inline ::dark::KernelTable<NAME##_fn>& NAME() { \
    static ::dark::KernelTable<NAME##_fn> table(#NAME);                            \
    return table;                                                                  \
  }                                                                                \
  }

#define DARK_CONCAT_INNER(a, b) a##b
#define DARK_CONCAT(a, b) DARK_CONCAT_INNER(a, b)

#if defined(DARK_CUDA_EMULATOR)
// In the CUDA emulator (tests/cuda_emulator/) the CUDA sources' kernels replace the real
// ones only when a test program installs the emulator (cuda_emu::install), never because
// the library was loaded: a program that links it by accident keeps its real backend.
namespace dark::cuda_emu {
void on_install(void (*replace_entry)());
}
#define DARK_REGISTER_KERNEL(NAME, DEVICE, DTYPE, FN)                                          \
  static const bool DARK_CONCAT(dark_registered_, __COUNTER__) = [] {                          \
    ::dark::cuda_emu::on_install(                                                              \
        [] { ::dark::kernels::NAME().replace(::dark::DeviceType::DEVICE, ::dark::DType::DTYPE, FN); }); \
    return true;                                                                               \
  }()
#else
// Registers FN as kernel NAME for (DEVICE, DTYPE) when the library loads.
#define DARK_REGISTER_KERNEL(NAME, DEVICE, DTYPE, FN)                                  \
  static const bool DARK_CONCAT(dark_registered_, __COUNTER__) = [] {                  \
    ::dark::kernels::NAME().set(::dark::DeviceType::DEVICE, ::dark::DType::DTYPE, FN); \
    return true;                                                                       \
  }()
#endif
