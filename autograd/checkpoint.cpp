// Activation checkpointing (see checkpoint.h).
#include "autograd/checkpoint.h"

#include "autograd/grad_binding.h"
#include "autograd/grad_mode.h"
#include "autograd/tape.h"

namespace dark {
namespace {

// Rebinds *params to fresh leaves (same storage, requires grad) for its lifetime.
class ParamLeaves {
 public:
  explicit ParamLeaves(const std::vector<Tensor*>& params) : params_(params) {
    for (Tensor* p : params_) {
      saved_.push_back(*p);
      *p = p->detach();
      p->set_requires_grad(true);
    }
  }
  ~ParamLeaves() {
    for (std::size_t i = 0; i < params_.size(); ++i) *params_[i] = saved_[i];
  }
  Tensor grad(std::size_t i) const { return params_[i]->grad(); }
  // Leaf i's gradient is `zeroed`, the original's zeroed gradient buffer: the recomputed ops
  // write or add to it as they would without checkpointing.
  void bind_zeroed(std::size_t i, const Tensor& zeroed) const {
    bind_grad(*params_[i], zeroed);
    note_grad_zeroed(*params_[i]);
  }

 private:
  std::vector<Tensor*> params_;
  std::vector<Tensor> saved_;
};

}  // namespace

Tensor checkpoint(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
                  const std::vector<Tensor*>& params) {
  std::vector<Tensor> recorded = inputs;
  std::vector<Tensor*> trained;
  for (Tensor* p : params)
    if (p->requires_grad()) recorded.push_back(*p), trained.push_back(p);
  if (!should_record(recorded)) return fn(inputs);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = fn(inputs).detach();
  }
  std::vector<Tensor> saved;
  for (const Tensor& t : inputs) saved.push_back(t.detach());
  record("checkpoint", recorded, {&out}, [fn, inputs = std::move(saved), trained](BackwardContext& g) {
    TapeScope own_tape;
    EnableGradGuard recording;
    const ParamLeaves leaves(trained);
    // A parameter whose gradient buffer is zeroed and untouched (the first micro-batch after
    // zero_grad) hands it to its leaf: the gradients land as without checkpointing, with the
    // same bits (a linear's product written into the buffer, linear_group's batched one).
    std::vector<bool> into_buffer(trained.size());
    for (std::size_t j = 0; j < trained.size(); ++j) {
      const Tensor zeroed = g.take_zeroed_grad(inputs.size() + j);
      into_buffer[j] = zeroed.defined();
      if (into_buffer[j]) leaves.bind_zeroed(j, zeroed);
    }
    std::vector<Tensor> x;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      x.push_back(inputs[i].detach());
      if (g.needs_grad(i)) x.back().set_requires_grad(true);
    }
    const Tensor again = fn(x);
    backward(again, g.out_grad());
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (g.needs_grad(i) && x[i].grad().defined()) g.set_input_grad(i, x[i].grad());
    for (std::size_t j = 0; j < trained.size(); ++j)
      if (!into_buffer[j] && leaves.grad(j).defined()) g.set_input_grad(inputs.size() + j, leaves.grad(j));
  });
  return out;
}

}  // namespace dark
