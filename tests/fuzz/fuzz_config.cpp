// libFuzzer target: the run-config reader with `--set` overrides (train/config.h). The input
// is a JSON document (comments allowed), optionally followed by a NUL byte and override
// lines KEY=VALUE, one per line. load_config reads the document (from a memfd), applies the
// overrides, then parses, resolves and validates; malformed input must end in dark::Error.
// A config that loads must come back unchanged through to_json and parse_config, as a run
// folder's config.json does.
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_util.h"
#include "train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = input.find('\0');
  const std::string document = input.substr(0, nul);
  std::vector<std::string> overrides;
  if (nul != std::string::npos) {
    const std::string lines = input.substr(nul + 1);
    for (std::size_t begin = 0; begin <= lines.size();) {
      const std::size_t end = std::min(lines.find('\n', begin), lines.size());
      overrides.push_back(lines.substr(begin, end - begin));
      begin = end + 1;
    }
  }
  const dark::fuzz::MemFile file(reinterpret_cast<const std::uint8_t*>(document.data()), document.size());
  dark::train::RunConfig config;
  try {
    config = dark::train::load_config(file.path(), overrides);
  } catch (const dark::Error&) {
    return 0;
  }
  const nlohmann::json written = dark::train::to_json(config);
  const dark::train::RunConfig reread = dark::train::parse_config(written, "fuzz");
  DARK_FUZZ_ASSERT(dark::train::to_json(reread) == written);
  (void)dark::train::config_table(config);
  return 0;
}
