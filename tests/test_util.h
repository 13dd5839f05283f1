// Helpers shared by the GoogleTest suites under tests/: a temporary directory removed at the
// end of the test, file writing, a small deterministic text generator, and two ways to check
// the dark::Error a call throws (expect_error for message fragments, error_of for the exact
// message).
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include "core/backend.h"
#include "core/error.h"
#include "core/tensor.h"

// GPU tests start with this: they skip (visibly) where no GPU can run kernels, which is how
// "insufficient driver" and "no device" both read. Nothing else may depend on a GPU.
// The *_emulated twins of the GPU test programs (tests/CMakeLists.txt) run the same tests on
// the CUDA emulator, which they install at start, and where a GPU test must run: a program
// whose CUDA backend is not then the emulator stops instead of skipping its way to a pass.
#if defined(DARK_TEST_ON_CUDA_EMULATOR)
#include <cstdio>

#include "cuda_emulator/control.h"
inline const bool dark_test_emulator_checked = [] {
  ::dark::cuda_emu::install();
  if (!::dark::cuda_emu::active() || !::dark::cuda_available()) {
    std::fprintf(stderr, "this test program must run on the CUDA emulator, which is not its CUDA backend\n");
    std::abort();
  }
  return true;
}();
#define DARK_REQUIRE_GPU() ASSERT_TRUE(::dark::cuda_available()) << "the CUDA emulator reports no device"
#else
#define DARK_REQUIRE_GPU() \
  if (!::dark::cuda_available()) GTEST_SKIP() << "no CUDA device (or driver) on this machine"
#endif

namespace dark::testing {

// A fresh directory under the system temp folder, removed (with its contents) at the end of
// the test. `tmp / "a/b.txt"` names a path inside it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "darkformer-test-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) std::abort();
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return (path_ / rel).string(); }

 private:
  std::filesystem::path path_;
};

// Writes `text` to `path` (replacing any file there), creating the parent directories first.
inline void write_text(const std::string& path, const std::string& text) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// Deterministic English-like text: `lines` lines of words built from a few syllables.
inline std::string generated_text(int lines, std::uint64_t seed) {
  static const char* kSyllables[] = {"ka", "to", "ri", "ne", "su", "la", "mo", "pi", "der", "ion",
                                     "the", "and", "ing", "st", "qu", "ex"};
  std::uint64_t state = seed * 6364136223846793005ull + 1442695040888963407ull;
  auto next = [&](std::uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  std::string text;
  for (int l = 0; l < lines; ++l) {
    const auto words = 3 + next(8);
    if (next(5) == 0) text += "    ";
    for (std::uint64_t w = 0; w < words; ++w) {
      if (w) text += ' ';
      const auto syl = 1 + next(3);
      for (std::uint64_t s = 0; s < syl; ++s) text += kSyllables[next(16)];
    }
    text += next(3) == 0 ? ".\n" : "\n";
  }
  return text;
}

// Runs f and expects it to throw a dark::Error whose message contains every one of `parts`;
// a failure when it throws nothing (other exceptions propagate).
inline void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
  }
}

// Runs fn and returns the dark::Error message it throws ("" when it does not throw; other
// exceptions propagate). Compare it with EXPECT_EQ for the exact text.
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A tensor's values as doubles (any dtype, layout or device).
inline std::vector<double> values(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }

// |got - want| <= atol + rtol |want| everywhere; reports the worst element and the first bad ones.
inline void expect_close(const Tensor& got, const Tensor& want, double atol, double rtol, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << ": result undefined";
  ASSERT_TRUE(want.defined()) << what << ": reference undefined";
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = values(got), w = values(want);
  double worst = 0;
  int bad = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double err = std::fabs(g[i] - w[i]);
    worst = std::max(worst, err);
    if (!(err <= atol + rtol * std::fabs(w[i])) && bad++ < 5)
      ADD_FAILURE() << what << " element " << i << ": got " << g[i] << " want " << w[i] << " (abs err " << err << ")";
  }
  if (bad) ADD_FAILURE() << what << ": " << bad << " bad elements, max abs err " << worst;
}

// Key padding masks of (B, L) as 0 / 1 values for the attention tests: right padding (batch
// b keeps the first L - (b + 1) L / 4 keys), left padding (batch b drops the first
// (b + 1) L / 3, so early causal queries see no real key) and holes (a fixed scatter, some
// at chunk and tile edges).
enum class Padding { right, left, holes };
inline constexpr Padding kPaddings[] = {Padding::right, Padding::left, Padding::holes};

inline std::vector<std::int32_t> padding_mask(Padding kind, std::int64_t batch, std::int64_t len) {
  std::vector<std::int32_t> real;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t j = 0; j < len; ++j) {
      switch (kind) {
        case Padding::right: real.push_back(j < len - (b + 1) * len / 4); break;
        case Padding::left: real.push_back(j >= (b + 1) * len / 3); break;
        case Padding::holes: real.push_back((j * 7 + b * 3) % 5 < 3); break;
      }
    }
  return real;
}

inline const char* padding_name(Padding kind) {
  return kind == Padding::right ? " right padding" : kind == Padding::left ? " left padding" : " holes";
}

inline Tensor mask_tensor(const std::vector<std::int32_t>& real, std::int64_t batch, DType dtype = DType::i32) {
  const std::int64_t len = static_cast<std::int64_t>(real.size()) / batch;
  return Tensor::from_vector(real, {batch, len}).to(dtype);
}

}  // namespace dark::testing
