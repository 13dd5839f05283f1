// Parameter initialisation. Every weight is drawn from Philox keyed by (seed, a stream
// derived from the parameter's name), so initial weights do not depend on construction
// order and a model with one more layer keeps the others' initial values.
//
// Our documented scheme (GPT-2 / Llama style): linear and embedding weights ~ N(0, std^2)
// with std = init_std; the residual output projections (o_proj, down_proj) use
// std / sqrt(2 * n_layers) so the residual stream's variance does not grow with depth;
// biases 0; norm weights 1.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace dark::nn {

struct Init {
  double std = 0.02;
  std::uint64_t seed = 0;
  std::string name;  // the parameter's full name, keys the random stream
  DType dtype = DType::f32;

  Init with_name(const std::string& n) const { return {std, seed, n, dtype}; }
};

// 64-bit FNV-1a: the stream id of a parameter name.
std::uint64_t name_stream(const std::string& name);

// N(0, std^2) of the given shape and the init's dtype, from the init's stream.
Tensor normal_init(const Shape& shape, const Init& init);

}  // namespace dark::nn
