// Deferred index checks (see deferred_checks.h).
#include "core/deferred_checks.h"

#include "core/kernels.h"

namespace dark {
namespace {
thread_local DeferredChecks* current_scope = nullptr;
}  // namespace

DeferredChecks::DeferredChecks(Device device) : device_(device), outer_(current_scope) {
  if (device_.is_cuda()) slots_ = Tensor::full({kCapacity}, -1.0, DType::i64, device_);
  current_scope = this;
}

DeferredChecks::~DeferredChecks() {
  if (open_) current_scope = outer_;
}

void DeferredChecks::close() {
  if (!open_) return;
  DARK_CHECK(current_scope == this,
             "DeferredChecks::close: another scope was opened inside this one and is still open");
  current_scope = outer_;
  open_ = false;
}

Tensor DeferredChecks::verdicts() const {
  if (checks_.empty()) return Tensor();
  return core::slice(slots_, 0, 0, static_cast<std::int64_t>(checks_.size())).to(DType::f64);
}

void DeferredChecks::raise(const std::vector<double>& verdicts) const {
  for (std::size_t i = 0; i < verdicts.size() && i < checks_.size(); ++i) {
    if (verdicts[i] < 0) continue;
    const Check& c = checks_[i];
    const auto position = static_cast<std::int64_t>(verdicts[i]);
    const std::int64_t value =
        static_cast<std::int64_t>(core::slice(c.index.contiguous(), 0, position, position + 1).to(DType::f64).item());
    throw Error(index_out_of_range(c.kernel, value, position, c.n));
  }
}

std::int64_t* DeferredChecks::slot_for(const char* kernel, const Tensor& index, std::int64_t n) {
  DeferredChecks* scope = current_scope;
  if (scope == nullptr || !scope->device_.is_cuda() || scope->device_ != index.device()) return nullptr;
  const auto k = static_cast<std::int64_t>(scope->checks_.size());
  if (k >= kCapacity) return nullptr;
  scope->checks_.push_back({kernel, core::reshape(index, {index.numel()}), n});
  return scope->slots_.data<std::int64_t>() + k;
}

}  // namespace dark
