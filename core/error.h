// Errors: every failed check throws dark::Error whose message names the op and the
// offending shapes / dtypes / devices, plus the source location for bugs.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace dark {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A device that cannot hold an allocation even after the caching allocator returned its
// cache: the message says how much was asked and what the device had.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

namespace detail {
inline void append(std::ostringstream&) {}
template <class T, class... Rest>
void append(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append(os, rest...);
}
}  // namespace detail

// Builds a message from streamable pieces: str("matmul: ", a, " vs ", b).
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  return os.str();
}

}  // namespace dark

// Throws dark::Error with the streamed message when cond is false.
#define DARK_CHECK(cond, ...)                                   \
  do {                                                          \
    if (!(cond)) throw ::dark::Error(::dark::str(__VA_ARGS__)); \
  } while (0)
