// The single backend (see single_communicator.h): checks, then local copies on the
// device's own stream order (Tensor::copy_), so the result is ready for the next kernel.
#include "train/dist/single_communicator.h"

#include "train/dist/collective.h"

namespace dark::dist {
namespace {

void copy_unless_in_place(const Tensor& from, const Tensor& to, const BlockLayout& layout) {
  if (!layout.in_place && layout.n > 0) core::reshape(to, from.shape()).copy_(from);
}

}  // namespace

std::string SingleCommunicator::describe() const {
  return str("single (rank 0 of 1) on ", device_.to_string());
}

Work SingleCommunicator::all_reduce_async(const Tensor& t, ReduceOp) {
  check_all_reduce(t, device_);
  return finished_work();
}

Work SingleCommunicator::reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp) {
  copy_unless_in_place(in, out, check_reduce_scatter(in, out, 0, 1, device_));
  return finished_work();
}

Work SingleCommunicator::all_gather_async(const Tensor& in, const Tensor& out) {
  copy_unless_in_place(in, out, check_all_gather(in, out, 0, 1, device_));
  return finished_work();
}

Work SingleCommunicator::broadcast_async(const Tensor& t, int root) {
  check_broadcast(t, root, 1, device_);
  return finished_work();
}

}  // namespace dark::dist
