// Module: a node of the model tree. Parameters and child modules are registered under
// names, so every parameter has a stable hierarchical name in Hugging Face Llama style
// ("model.layers.3.self_attn.q_proj.weight"). Names drive checkpoints, freezing patterns
// and optimizer groups.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace dark::nn {

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter below this module, depth first in registration order, with its full
  // name. The pointers address the module's own Tensor members, so a caller may rebind
  // them (ParameterBuffer moves parameters into one flat buffer this way).
  std::vector<std::pair<std::string, Tensor*>> named_parameters(const std::string& prefix = "");
  std::int64_t num_parameters();

  // Training mode enables dropout; eval mode is deterministic.
  void train(bool on = true);
  bool training() const { return training_; }

  // Moves every parameter below this module to `device` (trainable and frozen alike, keeping
  // requires_grad) and lets each module move its other state (move_state). Parameters keep
  // their addresses (the Tensor members are rebound in place), but one that moves becomes a
  // new tensor: call this before a ParameterBuffer or optimizer takes the parameters.
  void to(Device device);
  // Where the parameters live (the first one's device; the CPU for a module without any).
  Device device();
  // Mixed precision: the dtype activations and products run in below this module (by default
  // the parameters' own; bf16 for training.precision bf16). Parameters keep their dtype (f32
  // master weights); layers read them through to_compute.
  void set_compute_dtype(DType dtype);
  // t as the compute dtype: a differentiable cast (its gradient comes back in t's dtype), or t
  // itself when the dtypes agree (then nothing is recorded and no bit changes).
  Tensor to_compute(const Tensor& t) const;
  // The dtype set by set_compute_dtype; empty while every layer computes in its parameters'.
  std::optional<DType> compute_dtype() const { return compute_dtype_; }

 protected:
  // State of this module that is neither a parameter nor a child (cached feature matrices,
  // say) and lives on a device: move or drop it. Called by to(); nothing by default.
  virtual void move_state(Device /*device*/) {}

  Tensor& register_parameter(const std::string& name, Tensor value);
  template <class M>
  M& register_module(const std::string& name, M& module) {
    children_.emplace_back(name, &module);
    return module;
  }

 private:
  // Parameters live in a vector of unique_ptr-like stable storage so pointers stay valid.
  std::vector<std::pair<std::string, std::unique_ptr<Tensor>>> params_;
  std::vector<std::pair<std::string, Module*>> children_;
  bool training_ = true;
  std::optional<DType> compute_dtype_;
};

}  // namespace dark::nn
