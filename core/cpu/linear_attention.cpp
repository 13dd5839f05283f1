// CPU linear attention on given feature logits (autograd/ops.h, linear_attention), float32
// and float64: the sweeps of linear_attention_sweeps.h reading the logit tensors in place.
#include <cstdint>

#include "core/cpu/linear_attention_sweeps.h"
#include "core/kernels.h"

namespace dark::cpu {
namespace {

template <class T>
void linear_attention_forward_kernel(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                     Tensor& out, Tensor& den, Tensor& log_norm, bool causal, double eps,
                                     std::int64_t chunk) {
  Problem<T> pr(q, k, v, key_mask, causal, chunk);
  if (log_norm.defined()) pr.log_norm = log_norm.data<T>();
  DARK_CHECK(forward_sweeps(pr, static_cast<T>(eps), out.data<T>(), den.data<T>()),
             "linear_attention: dnnl_sgemm failed on a chunk (m = ", pr.m, ", Dv = ", pr.dv, ")");
}

template <class T>
void linear_attention_backward_kernel(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                      const Tensor& out, const Tensor& den, const Tensor& dout, const Tensor& dlog_norm,
                                      Tensor& dq, Tensor& dk, Tensor& dv, bool causal, std::int64_t chunk) {
  Problem<T> pr(q, k, v, key_mask, causal, chunk);
  if (dlog_norm.defined()) pr.dlog_norm = dlog_norm.data<T>();
  pr.src.dq = dq.data<T>();
  pr.src.dk = dk.data<T>();
  DARK_CHECK(backward_sweeps(pr, out.data<T>(), den.data<T>(), dout.data<T>(), dv.data<T>(), static_cast<T*>(nullptr), 0),
             "linear_attention backward: dnnl_sgemm failed on a chunk (m = ", pr.m, ", Dv = ", pr.dv, ")");
}

DARK_REGISTER_KERNEL(linear_attention_forward, cpu, f32, linear_attention_forward_kernel<float>);
DARK_REGISTER_KERNEL(linear_attention_forward, cpu, f64, linear_attention_forward_kernel<double>);
DARK_REGISTER_KERNEL(linear_attention_backward, cpu, f32, linear_attention_backward_kernel<float>);
DARK_REGISTER_KERNEL(linear_attention_backward, cpu, f64, linear_attention_backward_kernel<double>);

}  // namespace
}  // namespace dark::cpu
