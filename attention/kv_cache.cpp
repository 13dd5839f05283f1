// Key/value cache decoding (see kv_cache.h).
#include "attention/kv_cache.h"

#include "autograd/ops.h"

namespace dark::attention {

Tensor attend_with_cache(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                         std::unique_ptr<nn::DecodeState>& state, std::int64_t window) {
  DARK_CHECK(window >= 0, "attention decode: window must be >= 0 (0 = no window), got ", window);
  if (!state) state = std::make_unique<KeyValueCache>();
  auto* cache = dynamic_cast<KeyValueCache*>(state.get());
  DARK_CHECK(cache != nullptr, "attention decode: the state was made by another attention kind");
  cache->keys = cache->keys.defined() ? concat({cache->keys, k}, 1) : k.contiguous();
  cache->values = cache->values.defined() ? concat({cache->values, v}, 1) : v.contiguous();
  // causal with T < S: query t sees keys s <= t + S - T, i.e. the prefix and itself (and,
  // with a window, not the keys s <= t + S - T - window). The cache is a suffix of the
  // sequence ending at the newest position, so these relative positions stay right.
  Tensor out = flash_attention(q, cache->keys, cache->values, /*causal=*/true, scale, Tensor(), window);
  // The next query (one past the newest key) sees at most the last window - 1 cached keys;
  // keep window of them (a copy, so the dropped prefix's memory is freed).
  const std::int64_t cached = cache->keys.size(1);
  if (window > 0 && cached > window) {
    cache->keys = slice(cache->keys, 1, cached - window, cached).contiguous();
    cache->values = slice(cache->values, 1, cached - window, cached).contiguous();
  }
  return out;
}

}  // namespace dark::attention
