// Helpers shared by the tests/test_data_*.cpp suites: a temporary directory removed at
// the end of the test, file writing, and a small deterministic text generator.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace dark::data::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "darkformer-data-XXXXXX").string();
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

inline void write_text(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
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

}  // namespace dark::data::testing
