// Gradient binding and "gradient ready" hooks: the two calls through which code above
// autograd (nn::ParameterBuffer, data-parallel training) shapes where a parameter's gradient
// lives and learns when it is final, without touching AutogradMeta.
//
// bind_grad: the parameter's gradient becomes a caller-owned view (a segment of a flat
// buffer). backward adds into that view in place and Tensor::zero_grad() zeroes it (or the
// owner zeroes the buffer and calls note_grad_zeroed); the binding lasts as long as the parameter's autograd state (a detach() or a new leaf starts
// unbound).
//
// on_grad_ready: a hook called during backward() once the parameter's gradient for that
// backward call is final, so an all-reduce of its bucket can start while the replay goes on.
//  - When: right after the tape entry that last contributes to the parameter has been
//    replayed. The replay runs in reverse recording order, so that is the parameter's first
//    use in the forward pass; a parameter used twice fires only after its earlier use, with
//    both contributions summed. Hooks therefore fire in reverse order of first use in the
//    forward (the LM head before the embedding); parameters whose last contribution is the
//    same entry fire in that entry's input order. When backward() starts from the parameter
//    itself, its hooks fire after the seed has been added.
//  - Which: every hooked parameter the graph being replayed reaches, exactly once per
//    backward() call. Reaching is structural (the parameter is an input of an entry the
//    root depends on), so a hook fires even when no gradient actually flowed to it (a
//    backward that produced none for it), and the set of hooks fired depends only on the
//    graph's shape: the same on every data-parallel rank. Parameters the graph does not
//    reach get no call at all (like PyTorch DDP's unused parameters): a caller that waits
//    for every parameter must know which ones its forward pass uses.
//  - Gradient accumulation over micro-batches: each backward() call fires again, with the
//    gradient accumulated so far (this backward's contribution included).
//  - Context: hooks run on the thread that called backward(), with grad mode off, between
//    two tape entries; they may read (and modify) the gradient, but must not call
//    backward(). Several hooks on one parameter run in the order they were added. A hook
//    lives in the parameter's autograd state, so it must not capture the parameter Tensor
//    by value (that would keep the state alive forever); capture a pointer or reference.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "core/tensor.h"

namespace dark {

// Makes grad_view param's gradient. param: a leaf that requires grad. grad_view: param's
// shape, dtype grad_dtype(param.dtype()), param's device, contiguous (a segment of a flat
// buffer). Its current values become the gradient (backward adds to them); any gradient
// param already had is dropped.
void bind_grad(Tensor& param, const Tensor& grad_view);

// Tells backward that the caller has just filled param's bound gradient with zeros (a flat
// buffer zeroed at once): until something adds to it, the op that first contributes may
// write its gradient there directly (BackwardContext::take_zeroed_grad). Anything else that
// writes the view between this call and that backward must not use it.
void note_grad_zeroed(Tensor& param);

// Removes the hook it was returned for; does nothing when called again, on a default
// handle, or after the parameter's autograd state is gone.
class GradReadyHandle {
 public:
  GradReadyHandle() = default;
  void remove();

 private:
  friend GradReadyHandle on_grad_ready(Tensor& param, std::function<void()> hook);
  std::weak_ptr<AutogradMeta> meta_;
  std::uint64_t id_ = 0;
};

// Adds a gradient-ready hook to param (a leaf that requires grad); see the top of this file.
GradReadyHandle on_grad_ready(Tensor& param, std::function<void()> hook);

}  // namespace dark
