// core/portable_math.h's functions as compiled in tests/portable_math_contracted.cpp, with
// FMA contraction on (see there).
#pragma once
#include <cstdint>

namespace portable_math_contracted {

double log_positive(double x);
double sin_turns(std::uint32_t n);
double cos_turns(std::uint32_t n);
// a * x + y as written (contracted into one FMA there) and through portable::mul / add.
double axpy_plain(double a, double x, double y);
double axpy_portable(double a, double x, double y);

}  // namespace portable_math_contracted
