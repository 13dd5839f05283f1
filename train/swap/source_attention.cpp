// The source's attention at the swapped layers (see source_attention.h).
#include "train/swap/source_attention.h"

#include <algorithm>
#include <utility>

#include "attention/factory.h"
#include "autograd/grad_mode.h"
#include "nn/init.h"

namespace dark::train {

SourceAttention::SourceAttention(nn::CausalLM& model, const std::vector<int>& layers)
    : model_(model), layers_(layers), targets_(layers.size()) {
  const nn::ModelConfig& c = model.config();
  const nn::AttentionFactory softmax = attention::make_factory(attention::AttentionConfig{});
  NoGradGuard no_grad;
  for (std::size_t j = 0; j < layers_.size(); ++j) {
    nn::SelfAttention& swapped = model_.model.layers[layers_[j]]->self_attn;
    std::unique_ptr<nn::SelfAttention> copy;
    {
      const nn::SkipInitialisation loaded_next;  // every weight is copied below
      const nn::Init init{c.init_std, c.seed, "source_attention", c.dtype};
      copy = std::make_unique<nn::SelfAttention>(c, layers_[j], init, init, softmax);
    }
    auto theirs = swapped.named_parameters();
    for (auto& [name, p] : copy->named_parameters()) {
      const auto it = std::find_if(theirs.begin(), theirs.end(), [&](const auto& np) { return np.first == name; });
      DARK_CHECK(it != theirs.end(), "attention transfer: layer ", layers_[j], " has no attention parameter '", name, "'");
      *p = it->second->detach().to(Device::cpu()).clone();
      p->set_requires_grad(false);
    }
    copy->to(swapped.q_proj.weight->device());
    copy->train(false);
    frozen_.push_back(std::move(copy));
    swapped.input_observer = [this, j](const Tensor& x) {
      NoGradGuard no_grad;
      nn::SelfAttention& source = *frozen_[j];
      const nn::SelfAttention::Heads h = source.project(x.detach(), 0);
      targets_[j] = {source.kernel->forward(h.q, h.k, h.v), h.q, h.k};
    };
  }
}

SourceAttention::~SourceAttention() {
  for (int i : layers_) model_.model.layers[i]->self_attn.input_observer = nullptr;
}

SourceAttention::Target SourceAttention::take(std::size_t j) {
  DARK_CHECK(targets_[j].out.defined(), "attention transfer: layer ", layers_[j], " ran without computing its target");
  return std::exchange(targets_[j], Target{});
}

}  // namespace dark::train
