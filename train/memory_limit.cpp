// The machine-limit probe of the memory pre-flight (see memory_limit.h).
#include "train/memory_limit.h"

#include <sys/resource.h>

#include <fstream>
#include <sstream>

#include "core/backend.h"
#include "core/error.h"

namespace dark::train {
namespace {

// /proc and /sys files report a size of 0: read them as a stream. "" when unreadable.
std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The value after "KEY:" on its own line, in kB; nullopt when missing.
std::optional<std::int64_t> kib_field(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(key.size() + 1));
    std::int64_t value = 0;
    std::string unit;
    if (!(fields >> value) || value < 0) return std::nullopt;
    fields >> unit;
    return unit == "kB" ? value * 1024 : value;
  }
  return std::nullopt;
}

// The room left under a cgroup limit: limit - (usage - inactive page cache), as `docker
// stats` counts it: the kernel reclaims inactive file pages before it kills (nullopt
// without a limit).
std::optional<MemoryLimit> cgroup_room(const std::string& dir, const std::string& limit_name,
                                       const std::string& usage_name, const std::string& inactive_key) {
  const std::string limit_file = dir + "/" + limit_name, usage_file = dir + "/" + usage_name;
  const auto limit = parse_cgroup_bytes(read_small_file(limit_file));
  // v1 reports "no limit" as about 2^63 rounded to pages: nothing a machine has.
  if (!limit || *limit >= (std::int64_t{1} << 60)) return std::nullopt;
  const std::int64_t usage = parse_cgroup_bytes(read_small_file(usage_file)).value_or(0);
  const std::int64_t inactive =
      std::min(usage, parse_memory_stat(read_small_file(dir + "/memory.stat"), inactive_key).value_or(0));
  return MemoryLimit{std::max<std::int64_t>(0, *limit - (usage - inactive)),
                     str("the cgroup limit ", limit_file, " (", *limit >> 20, " MiB) minus ", usage_file, " (",
                         usage >> 20, " MiB) less its ", inactive_key, " (", inactive >> 20, " MiB)")};
}

std::optional<MemoryLimit> cpu_limit() {
  std::optional<MemoryLimit> best;
  if (const auto available = parse_meminfo_available(read_small_file("/proc/meminfo")))
    best = MemoryLimit{*available, "MemAvailable in /proc/meminfo"};
  if (const auto v2 = parse_cgroup_v2_path(read_small_file("/proc/self/cgroup"))) {
    const std::string path = *v2 == "/" ? std::string() : *v2;
    for (const char* mount : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"})  // unified: the hybrid layout
      best = smallest(best, cgroup_room(mount + path, "memory.max", "memory.current", "inactive_file"));
  }
  // v1: the memory controller's mount shows this process's group (a container's namespace root).
  best = smallest(best, cgroup_room("/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes",
                                    "total_inactive_file"));
  return best;
}

}  // namespace

std::optional<std::int64_t> parse_meminfo_available(const std::string& meminfo) {
  return kib_field(meminfo, "MemAvailable");
}

std::optional<std::int64_t> parse_cgroup_bytes(const std::string& text) {
  std::istringstream in(text);
  std::string word;
  if (!(in >> word) || word == "max") return std::nullopt;
  try {
    std::size_t used = 0;
    const long long value = std::stoll(word, &used);
    if (used != word.size() || value < 0) return std::nullopt;
    return static_cast<std::int64_t>(value);
  } catch (const std::exception&) {  // not a number, or beyond int64
    return std::nullopt;
  }
}

std::optional<std::int64_t> parse_memory_stat(const std::string& memory_stat, const std::string& key) {
  std::istringstream lines(memory_stat);
  std::string name;
  std::int64_t value = 0;
  while (lines >> name >> value)
    if (name == key) return value;
  return std::nullopt;
}

std::optional<std::string> parse_cgroup_v2_path(const std::string& proc_self_cgroup) {
  std::istringstream lines(proc_self_cgroup);
  std::string line;
  while (std::getline(lines, line))
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return std::nullopt;
}

std::optional<std::int64_t> parse_status_kib(const std::string& status, const std::string& key) {
  return kib_field(status, key);
}

std::optional<MemoryLimit> smallest(std::optional<MemoryLimit> a, std::optional<MemoryLimit> b) {
  if (!a) return b;
  if (!b) return a;
  return b->bytes < a->bytes ? b : a;
}

std::optional<MemoryLimit> machine_memory_limit(Device device) {
  if (!device.is_cuda()) return cpu_limit();
  const auto [free_bytes, total_bytes] = backend_for(DeviceType::cuda).memory_info(device.index);
  if (total_bytes == 0) return std::nullopt;
  return MemoryLimit{static_cast<std::int64_t>(free_bytes),
                     str("free memory of ", device.to_string(), " (", total_bytes >> 20, " MiB in all)")};
}

std::int64_t resident_bytes() { return parse_status_kib(read_small_file("/proc/self/status"), "VmRSS").value_or(0); }

std::int64_t peak_resident_bytes() {
  if (const auto hwm = parse_status_kib(read_small_file("/proc/self/status"), "VmHWM")) return *hwm;
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // kB on Linux
}

}  // namespace dark::train
