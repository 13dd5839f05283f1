// Command-line parsing for the subcommands (see args.h).
#include "train/cli/args.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace dark::cli {

Args::Args(const std::vector<std::string>& args, const std::vector<FlagSpec>& specs) {
  for (const FlagSpec& s : specs) specs_[s.name] = s;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    const auto eq = flag.find('=');
    const bool inline_value = flag.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) value = flag.substr(eq + 1), flag = flag.substr(0, eq);
    auto it = specs_.find(flag);
    DARK_CHECK(it != specs_.end(), "unknown argument '", args[i], "'");
    const FlagSpec& spec = it->second;
    if (spec.value_name.empty()) {
      DARK_CHECK(!inline_value, flag, " takes no value");
      values_[flag].push_back("true");
      continue;
    }
    if (!inline_value) {
      DARK_CHECK(i + 1 < args.size(), flag, " needs a value (", spec.value_name, ")");
      value = args[++i];
    }
    DARK_CHECK(spec.repeated || !values_.count(flag), flag, " given more than once");
    values_[flag].push_back(value);
  }
}

bool Args::has(const std::string& flag) const { return values_.count(flag) > 0; }

std::string Args::get(const std::string& flag) const {
  auto it = values_.find(flag);
  if (it != values_.end()) return it->second.back();
  auto spec = specs_.find(flag);
  return spec == specs_.end() ? "" : spec->second.default_value;
}

std::string Args::require(const std::string& flag) const {
  DARK_CHECK(has(flag), "missing required argument ", flag);
  return get(flag);
}

std::vector<std::string> Args::all(const std::string& flag) const {
  auto it = values_.find(flag);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

double Args::number(const std::string& flag) const {
  const std::string text = get(flag);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  DARK_CHECK(!text.empty() && *end == '\0', flag, ": '", text, "' is not a number");
  DARK_CHECK(std::isfinite(v) && errno != ERANGE, flag, ": '", text, "' is not a finite number");
  return v;
}

long long Args::integer(const std::string& flag, long long min, long long max) const {
  const std::string text = get(flag);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  DARK_CHECK(!text.empty() && *end == '\0', flag, ": '", text, "' is not an integer");
  const bool in_range = errno != ERANGE && v >= min && v <= max;
  if (!in_range) {
    const bool bounded_below = min != std::numeric_limits<long long>::min();
    const bool bounded_above = max != std::numeric_limits<long long>::max();
    const std::string range = bounded_below && bounded_above ? str("in [", min, ", ", max, "]")
                              : bounded_below                ? str(">= ", min)
                                                             : str("<= ", max);
    throw Error(str(flag, ": ", text, " is out of range: expected an integer ", range));
  }
  return v;
}

std::vector<long long> Args::integers(const std::string& flag, long long min, long long max) const {
  const std::string text = get(flag);
  std::vector<long long> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    DARK_CHECK(!item.empty() && *end == '\0' && errno != ERANGE, flag, ": expected integers separated by commas, got '",
               text, "'");
    DARK_CHECK(v >= min && v <= max, flag, ": ", v, " is out of range: expected integers in [", min, ", ", max, "]");
    out.push_back(v);
    if (comma == text.size()) return out;
    start = comma + 1;
  }
}

std::string flags_usage(const std::vector<FlagSpec>& specs) {
  std::string out;
  for (const FlagSpec& s : specs) {
    std::string left = "  " + s.name + (s.value_name.empty() ? "" : " " + s.value_name);
    if (left.size() < 26) left += std::string(26 - left.size(), ' ');
    out += left + " " + s.help;
    if (!s.default_value.empty()) out += " (default: " + s.default_value + ")";
    out += "\n";
  }
  return out;
}

bool print_help_if_asked(const std::vector<std::string>& args, const char* usage, const std::vector<FlagSpec>& specs) {
  for (const auto& a : args)
    if (a == "--help" || a == "-h") {
      std::printf("%s\n\noptions:\n%s", usage, flags_usage(specs).c_str());
      return true;
    }
  return false;
}

}  // namespace dark::cli
