// Kernels that stand in front of a model's own for a while, and the scope that installs them:
// the attention transfer fits a layer's kernel against a target this way, the probe and the
// tests record what a layer's kernel is given. A wrapper passes every call to the kernel it
// holds unless it overrides it; the wrapped kernel stays registered under the layer's
// "feature_map", so its parameters keep their names while it is wrapped.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/model.h"

namespace dark::train {

class KernelWrapper : public nn::AttentionKernel {
 public:
  explicit KernelWrapper(std::unique_ptr<nn::AttentionKernel> wrapped) : inner(std::move(wrapped)) {}
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask) override {
    return inner->forward(q, k, v, key_mask);
  }
  Tensor decode(const Tensor& q, const Tensor& k, const Tensor& v, std::unique_ptr<nn::DecodeState>& state) override {
    return inner->decode(q, k, v, state);
  }
  const char* kind() const override { return inner->kind(); }
  std::string describe() const override { return inner->describe(); }

  std::unique_ptr<nn::AttentionKernel> inner;
};

// Keeps the queries, keys and values (detached) of every forward() it passes on.
class RecordingKernel final : public KernelWrapper {
 public:
  struct Inputs {
    Tensor q, k, v;
  };
  using KernelWrapper::KernelWrapper;
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask) override {
    seen.push_back({q.detach(), k.detach(), v.detach()});
    return inner->forward(q, k, v, key_mask);
  }
  std::vector<Inputs> seen;
};

// Every layer of `model`, in order.
inline std::vector<int> every_layer(const nn::CausalLM& model) {
  std::vector<int> layers(model.model.layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) layers[i] = static_cast<int>(i);
  return layers;
}

// Puts a Wrapper in front of the kernels of `layers` for the scope's life; the model gets its
// own kernels back on every path out, an exception included.
template <class Wrapper>
class KernelScope {
 public:
  KernelScope(nn::CausalLM& model, std::vector<int> layers) : model_(model), layers_(std::move(layers)) {
    for (int i : layers_) {
      auto& slot = model_.model.layers[i]->self_attn.kernel;
      auto wrapper = std::make_unique<Wrapper>(std::move(slot));
      at.push_back(wrapper.get());
      slot = std::move(wrapper);
    }
  }
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;
  ~KernelScope() {
    for (std::size_t j = 0; j < layers_.size(); ++j) model_.model.layers[layers_[j]]->self_attn.kernel = std::move(at[j]->inner);
  }
  const std::vector<int>& layers() const { return layers_; }
  std::vector<Wrapper*> at;  // by position in layers(); owned by the layers while the scope lives

 private:
  nn::CausalLM& model_;
  std::vector<int> layers_;
};

}  // namespace dark::train
