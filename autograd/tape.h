// The tape. Differentiable ops append an entry (op name, input and output autograd state,
// backward closure) in execution order while grad mode is on and an input requires grad.
// backward() replays the entries in reverse: each entry receives its outputs' gradients,
// returns its inputs' gradients, which accumulate (in fp32 for bf16) into the inputs'
// AutogradMeta; then the entry and everything it saved are freed. Leaves keep their
// accumulated .grad() across backward calls until zero_grad().
//
// A leaf whose gradient was bound to a view of a flat buffer (bind_grad in
// autograd/grad_binding.h) accumulates into that view in place. Before the replay,
// backward() scans the tape once for the leaves with gradient-ready hooks (on_grad_ready)
// that the root's graph reaches and the entry that last contributes to each; it calls
// their hooks right after replaying (or skipping) that entry.
//
// One tape per thread. backward() consumes the whole tape, so build one graph per
// backward call (a later graph that shares recorded ops with a consumed one must be
// recomputed).
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace dark {

// What the tape keeps of an op's output: its shape, dtype and device, not its data (holding
// the output itself would keep every intermediate alive until its backward ran, even one that
// no later op saved).
struct OutputTemplate {
  Shape shape;
  DType dtype;
  Device device;
};

// What a backward closure sees: gradients of the op's outputs (same shapes; zeros where
// none reached an output) and which inputs need a gradient. It sets gradients for the inputs that do.
class BackwardContext {
 public:
  // The gradient of output i: zeros (made when first asked for) where none reached it.
  const Tensor& out_grad(std::size_t i = 0) const;
  // Whether a gradient reached output i; where none did, an op may skip what out_grad(i)'s
  // zeros would contribute (add_rms_norm's sum when only the norm is used).
  bool has_out_grad(std::size_t i) const { return !zero_out_.at(i); }
  bool needs_grad(std::size_t i) const { return needs_.at(i); }
  void set_input_grad(std::size_t i, Tensor grad) { in_grads_.at(i) = std::move(grad); }
  // Where input i's gradient may be written directly: when input i is a parameter whose
  // bound gradient buffer was zeroed and has received nothing since (note_grad_zeroed in
  // grad_binding.h), that view (contiguous, in grad_dtype); else an undefined tensor. An op
  // that gets the view must write its whole gradient for input i into it (over the zeros,
  // which makes it the gradient accumulated so far) and set none: a weight gradient's product
  // then writes the buffer itself, with no temporary to add in a second pass. Offered once.
  Tensor take_zeroed_grad(std::size_t i);

  mutable std::vector<Tensor> out_grads_;  // undefined until asked for where none reached the output
  std::vector<bool> zero_out_;             // no gradient reached output i: out_grads_[i] is (or will be) zeros
  const std::vector<OutputTemplate>* out_templates_ = nullptr;  // shape, dtype and device of each output
  std::vector<bool> needs_;
  std::vector<Tensor> in_grads_;
  std::vector<AutogradMeta*> inputs_;  // null where no gradient is needed
  std::vector<bool> taken_;            // take_zeroed_grad gave input i its buffer
};

using BackwardFn = std::function<void(BackwardContext&)>;

// True when an op with these inputs must be recorded (grad mode on, an input requires grad).
bool should_record(std::initializer_list<const Tensor*> inputs);
bool should_record(const std::vector<Tensor>& inputs);

// Records an op: marks the outputs as requiring grad and produced by this entry.
// Call only when should_record(inputs) is true.
void record(const char* op, const std::vector<Tensor>& inputs, std::vector<Tensor*> outputs,
            BackwardFn backward);

// Convenience for the common case; does nothing unless should_record.
inline void record_if_needed(const char* op, std::initializer_list<Tensor> inputs,
                             std::initializer_list<Tensor*> outputs, BackwardFn backward) {
  std::vector<Tensor> in(inputs);
  if (should_record(in)) record(op, in, std::vector<Tensor*>(outputs), std::move(backward));
}

// Backpropagates from `output`. Without `grad`, output must hold one element.
void backward(const Tensor& output, const Tensor& grad = Tensor());

// While it exists, this thread records on a fresh, empty tape; the enclosing one comes back
// when it ends. Activation checkpointing runs its recomputation and the backward through it
// on one, inside the enclosing backward.
class TapeScope {
 public:
  TapeScope();
  ~TapeScope();
  TapeScope(const TapeScope&) = delete;
  TapeScope& operator=(const TapeScope&) = delete;

 private:
  struct Saved;
  std::unique_ptr<Saved> saved_;
};

// Number of entries currently recorded on this thread's tape (for tests and leak checks).
std::size_t tape_size();
// Drops every recorded entry without running it (e.g. after an evaluation forward pass
// that accidentally ran with grad mode on).
void clear_tape();

}  // namespace dark
