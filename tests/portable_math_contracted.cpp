// core/portable_math.h compiled the way nvcc compiles device code: FMA instructions allowed
// and a * b + c contracted wherever the compiler likes (-mfma -ffp-contract=fast, set for
// this file in tests/CMakeLists.txt). test_portable_math.cpp compares these results with the
// default build's, bit for bit. The header is included into an anonymous namespace so this
// file's copies of its inline functions are its own (no ODR merging with the other file's).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/host_device.h"
#include "tests/portable_math_contracted.h"

namespace {
#include "core/portable_math.h"  // NOLINT: deliberately inside the namespace

namespace portable = dark::portable;  // this file's own copy (the anonymous namespace's)
}  // namespace

namespace portable_math_contracted {

double log_positive(double x) { return portable::log_positive(x); }
double sin_turns(std::uint32_t n) { return portable::sin_turns(n); }
double cos_turns(std::uint32_t n) { return portable::cos_turns(n); }
double axpy_plain(double a, double x, double y) { return a * x + y; }
double axpy_portable(double a, double x, double y) { return portable::add(portable::mul(a, x), y); }

}  // namespace portable_math_contracted
