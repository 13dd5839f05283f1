// Key/value cache decoding (see kv_cache.h).
#include "attention/kv_cache.h"

#include "autograd/ops.h"

namespace dark::attention {

Tensor attend_with_cache(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                         std::unique_ptr<nn::DecodeState>& state) {
  if (!state) state = std::make_unique<KeyValueCache>();
  auto* cache = dynamic_cast<KeyValueCache*>(state.get());
  DARK_CHECK(cache != nullptr, "attention decode: the state was made by another attention kind");
  cache->keys = cache->keys.defined() ? concat({cache->keys, k}, 1) : k.contiguous();
  cache->values = cache->values.defined() ? concat({cache->values, v}, 1) : v.contiguous();
  // causal with T < S: query t sees keys s <= t + S - T, i.e. the prefix and itself.
  return flash_attention(q, cache->keys, cache->values, /*causal=*/true, scale);
}

}  // namespace dark::attention
