// ModelConfig's auto values and shape rules (see model.h), apart from the model itself so
// that the config parser's users (tests/fuzz/) can link them without the layers.
#include "nn/model.h"

#include <algorithm>

namespace dark::nn {

int auto_d_ff(int d_model) {
  // Nearest multiple of 64 to 8 d_model / 3 = 64 * round(d_model / 24), halves rounded up.
  const std::int64_t multiples = (static_cast<std::int64_t>(d_model) + 12) / 24;
  return static_cast<int>(std::max<std::int64_t>(1, multiples) * 64);
}

bool ModelConfig::is_local_layer(int layer) const {
  return family == ModelFamily::gemma3 && sliding_window_pattern > 0 && (layer + 1) % sliding_window_pattern != 0;
}

ModelConfig ModelConfig::resolved() const {
  ModelConfig r = *this;
  if (r.n_kv_heads == 0) r.n_kv_heads = r.n_heads;
  if (r.d_ff == 0) r.d_ff = auto_d_ff(r.d_model);
  return r;
}

void ModelConfig::validate() const {
  DARK_CHECK(vocab_size >= 0 && d_model > 0 && n_layers > 0 && n_heads > 0 && n_kv_heads >= 0 && d_ff >= 0 &&
                 head_dim >= 0,
             "config: model: vocab_size, n_kv_heads, head_dim and d_ff must be >= 0, d_model, n_layers and n_heads "
             "positive");
  if (head_dim == 0) {
    DARK_CHECK(d_model % n_heads == 0, "config: model.n_heads: ", n_heads, " does not divide model.d_model (", d_model,
               "); set model.head_dim to use heads of another width");
    DARK_CHECK(head_size() % 2 == 0, "config: model.n_heads: head dimension model.d_model / model.n_heads = ", d_model,
               " / ", n_heads, " = ", head_size(), " is odd; RoPE rotates pairs of dimensions");
  } else {
    DARK_CHECK(head_dim % 2 == 0, "config: model.head_dim: ", head_dim, " is odd; RoPE rotates pairs of dimensions");
  }
  if (family == ModelFamily::gemma3) {
    DARK_CHECK(sliding_window > 0, "config: model.sliding_window: must be positive (gemma3's local layers)");
    DARK_CHECK(sliding_window_pattern > 0, "config: model.sliding_window_pattern: must be positive (1 = every layer global)");
    DARK_CHECK(rope_local_theta > 0, "config: model.rope_local_theta: must be positive");
  }
  const int kv_heads = n_kv_heads == 0 ? n_heads : n_kv_heads;
  DARK_CHECK(n_heads % kv_heads == 0, "config: model.n_kv_heads: ", kv_heads, " does not divide model.n_heads (",
             n_heads, ")");
}

}  // namespace dark::nn
