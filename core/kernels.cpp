// Printable names of the op enums (used in error messages and test names) and the shared
// messages of kernel errors.
#include "core/kernels.h"

namespace dark {

const char* binary_op_name(BinaryOp op) {
  static const char* names[] = {"add", "sub", "mul", "div", "maximum", "minimum", "pow",
                                "eq",  "ne",  "lt",  "le",  "gt",      "ge"};
  return names[static_cast<int>(op)];
}

const char* unary_op_name(UnaryOp op) {
  static const char* names[] = {"neg",  "exp",       "log",        "sqrt",       "rsqrt",     "tanh", "sigmoid",
                                "silu", "gelu",      "gelu_tanh",  "relu",       "abs",       "square",
                                "sin",  "cos",       "reciprocal", "add_scalar", "mul_scalar", "pow_scalar"};
  return names[static_cast<int>(op)];
}

const char* reduce_op_name(ReduceOp op) {
  static const char* names[] = {"sum", "mean", "max", "min", "logsumexp"};
  return names[static_cast<int>(op)];
}

std::string index_out_of_range(const char* kernel, std::int64_t index, std::int64_t position, std::int64_t n) {
  return str(kernel, ": index ", index, " at position ", position, " is out of range [0, ", n, ")");
}

}  // namespace dark
