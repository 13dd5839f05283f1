// A small command-line parser for the subcommands: each declares its flags (name, value
// or switch, default, help); unknown flags, missing values and malformed numbers are
// errors that name the flag. Repeated flags (--set) collect every value.
#pragma once
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace dark::cli {

struct FlagSpec {
  std::string name;           // "--config"
  std::string value_name;     // "FILE"; empty for a switch
  std::string default_value;  // shown in usage; "" = none (required flags say so in help)
  std::string help;
  bool repeated = false;
};

class Args {
 public:
  // Parses argv-style arguments against the specs; throws dark::Error on bad input.
  Args(const std::vector<std::string>& args, const std::vector<FlagSpec>& specs);

  bool has(const std::string& flag) const;
  std::string get(const std::string& flag) const;  // value or default
  std::string require(const std::string& flag) const;  // error naming the flag when absent
  std::vector<std::string> all(const std::string& flag) const;
  // A finite number; errors name the flag ("--lr: 'fast' is not a number").
  double number(const std::string& flag) const;
  // An integer in [min, max]; out-of-range values, including ones too large for any integer
  // type, are errors naming the flag and the range, never silently cut down.
  long long integer(const std::string& flag, long long min = std::numeric_limits<long long>::min(),
                    long long max = std::numeric_limits<long long>::max()) const;
  // Comma-separated integers, each in [min, max] ("512,1024,4096"); errors name the flag and item.
  std::vector<long long> integers(const std::string& flag, long long min = std::numeric_limits<long long>::min(),
                                  long long max = std::numeric_limits<long long>::max()) const;

 private:
  std::map<std::string, std::vector<std::string>> values_;
  std::map<std::string, FlagSpec> specs_;
};

// "  --config FILE   run config (default: ...)" lines for a usage message.
std::string flags_usage(const std::vector<FlagSpec>& specs);

// The --help flag every subcommand lists.
inline const FlagSpec kHelpFlag{"--help", "", "", "show this message"};

// When args hold --help or -h: prints `usage` and the flags, and returns true (the command
// then exits 0 without parsing anything else).
bool print_help_if_asked(const std::vector<std::string>& args, const char* usage, const std::vector<FlagSpec>& specs);

}  // namespace dark::cli
