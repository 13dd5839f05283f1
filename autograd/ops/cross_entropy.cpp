// Cross entropy over rows of logits, fused with log_softmax and the mean over counted rows.
// The forward saves only the per-row logsumexp (N values, not the (N, V) softmax); the
// backward writes dlogits = (exp(logits - lse) - onehot(target)) * dloss / count directly.
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace dark {

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets_in, std::int64_t ignore_index) {
  ops_detail::check_floating("cross_entropy", logits_in);
  ops_detail::check_index("cross_entropy", targets_in);
  DARK_CHECK(logits_in.device() == targets_in.device(), "cross_entropy: device mismatch: logits ",
             logits_in.describe(), " vs targets ", targets_in.describe());
  DARK_CHECK(logits_in.dim() == 2, "cross_entropy: logits must be (N, V), got ", logits_in.describe());
  DARK_CHECK(targets_in.dim() == 1 && targets_in.shape()[0] == logits_in.shape()[0],
             "cross_entropy: targets must be (N) = (", logits_in.shape()[0], ") for logits ", logits_in.describe(),
             ", got ", targets_in.describe());
  DARK_CHECK(logits_in.shape()[1] > 0 || logits_in.shape()[0] == 0,
             "cross_entropy: logits have no classes: ", logits_in.describe());
  const Tensor logits = logits_in.contiguous();
  const Tensor targets = targets_in.contiguous();
  Tensor lse = Tensor::empty({logits.shape()[0]}, grad_dtype(logits.dtype()), logits.device());
  Tensor loss = Tensor::empty({}, logits.dtype(), logits.device());
  kernels::cross_entropy_forward().get(logits.device().type, logits.dtype())(logits, targets, lse, loss, ignore_index);
  if (should_record({&logits_in})) {
    record("cross_entropy", {logits_in}, {&loss},
           [logits = logits.detach(), targets, lse, ignore_index](BackwardContext& g) {
             const Tensor dloss = g.out_grad().contiguous();
             Tensor dlogits = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
             kernels::cross_entropy_backward().get(logits.device().type, logits.dtype())(logits, targets, lse, dloss,
                                                                                         dlogits, ignore_index);
             g.set_input_grad(0, dlogits);
           });
  }
  return loss;
}

}  // namespace dark
