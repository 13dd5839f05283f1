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

// N(0, std^2) of the given shape and the init's dtype, from the init's stream; allocated but
// not drawn while a SkipInitialisation is alive on this thread.
Tensor normal_init(const Shape& shape, const Init& init);

// While alive on this thread, normal_init allocates without drawing: for a model whose every
// parameter is loaded right after it is built (a checkpoint's, for eval, generate or a resumed
// run; train::load_parameters refuses one with a parameter missing), where the draw would be
// thrown away (most of a second for SmolLM2-135M on 2 cores).
class SkipInitialisation {
 public:
  SkipInitialisation();
  ~SkipInitialisation();
  SkipInitialisation(const SkipInitialisation&) = delete;
  SkipInitialisation& operator=(const SkipInitialisation&) = delete;

 private:
  bool previous_;
};

}  // namespace dark::nn
