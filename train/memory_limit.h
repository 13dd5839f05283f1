// What memory the machine lets a run use, and what the process holds: the probe behind the
// memory pre-flight (train/memory_estimate.h). On the CPU the limit is the smaller of the
// kernel's MemAvailable (/proc/meminfo) and the room left in the process's cgroup (v2:
// memory.max - memory.current; v1: memory.limit_in_bytes - memory.usage_in_bytes; the
// inactive page cache, which the kernel reclaims first, counted as room); on a GPU
// it is the device's free memory (DeviceBackend::memory_info). The parsers take file
// contents, so they are tested on sample text.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/device.h"

namespace dark::train {

struct MemoryLimit {
  std::int64_t bytes = 0;  // what the run may still allocate
  std::string source;      // where the number comes from, e.g. "MemAvailable in /proc/meminfo"
};

// MemAvailable of a /proc/meminfo text, in bytes; nullopt when the line is missing.
std::optional<std::int64_t> parse_meminfo_available(const std::string& meminfo);
// A cgroup memory file's number (memory.max, memory.current, memory.limit_in_bytes, ...);
// nullopt for "max" (no limit), an empty or unreadable text. v1's "no limit" is a huge
// number (about 2^63), which callers compare against MemTotal-scale values.
std::optional<std::int64_t> parse_cgroup_bytes(const std::string& text);
// A "KEY VALUE" line of a cgroup memory.stat text (inactive_file, total_inactive_file).
std::optional<std::int64_t> parse_memory_stat(const std::string& memory_stat, const std::string& key);
// The cgroup v2 path of this process from a /proc/self/cgroup text (the "0::/PATH" line);
// nullopt on a v1-only system.
std::optional<std::string> parse_cgroup_v2_path(const std::string& proc_self_cgroup);
// A VmHWM / VmRSS style line ("VmHWM:   123456 kB") of a /proc/self/status text, in bytes.
std::optional<std::int64_t> parse_status_kib(const std::string& status, const std::string& key);

// The smallest of the limits that are known; nullopt when none is.
std::optional<MemoryLimit> smallest(std::optional<MemoryLimit> a, std::optional<MemoryLimit> b);

// What `device` lets this process still allocate; nullopt when it cannot be told (no
// /proc, a GPU backend that does not report).
std::optional<MemoryLimit> machine_memory_limit(Device device);

// This process's resident set now (VmRSS) and its peak so far (VmHWM, else getrusage's
// ru_maxrss), in bytes; 0 when unknown.
std::int64_t resident_bytes();
std::int64_t peak_resident_bytes();

}  // namespace dark::train
