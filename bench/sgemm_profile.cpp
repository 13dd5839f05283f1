// libdarkformer_sgemm_profile.so: an LD_PRELOAD shim for profiling (not linked into
// anything). It interposes oneDNN's dnnl_sgemm, times every call and, at exit, prints to
// stderr the time per (caller, transa, transb, m, n, k), the caller being the function
// that called dnnl_sgemm (its return address, named by addr2line when that is installed,
// else shown as DSO+offset). Every float32 matrix product in darkformer goes through
// dnnl_sgemm (core/cpu/matmul.cpp and the flash-attention tiles), so this splits matmul
// time by op where perf sees only JIT code. Profiles one thread's view per call: with
// several threads, tile times add up across threads.
//
//   LD_PRELOAD=build/bench/libdarkformer_sgemm_profile.so build/bench/darkformer_bench_train ...
#include <dlfcn.h>
#include <stdio.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace {
using Sgemm = dnnl_status_t (*)(char, char, dnnl_dim_t, dnnl_dim_t, dnnl_dim_t, float, const float*, dnnl_dim_t,
                                const float*, dnnl_dim_t, float, float*, dnnl_dim_t);
using Key = std::tuple<std::string, char, char, dnnl_dim_t, dnnl_dim_t, dnnl_dim_t>;
struct Value {
  std::int64_t calls = 0;
  double seconds = 0;
};


// "DSO_PATH+0xOFFSET" for a code address (cheap: the name is looked up once, at exit).
std::string caller_key(void* address) {
  Dl_info info{};
  if (!dladdr(address, &info) || !info.dli_fname) return "?";
  char buf[64];
  std::snprintf(buf, sizeof buf, "+0x%llx",
                static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(address) -
                                                reinterpret_cast<std::uintptr_t>(info.dli_fbase)));
  return info.dli_fname + std::string(buf);
}

// The function's short name via addr2line ("matmul_f32", "backward_tile"), else DSO+offset.
std::string caller_name(const std::string& key) {
  const auto plus = key.rfind('+');
  std::string dso = key.substr(0, plus), offset = key.substr(plus + 1);
  std::string fallback = dso.substr(dso.find_last_of('/') + 1) + "+" + offset;
  const std::string cmd = "addr2line -f -C -e '" + dso + "' " + offset + " 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return fallback;
  char line[8192] = {};
  const bool got = std::fgets(line, sizeof line, pipe) != nullptr;
  pclose(pipe);
  std::string name = got ? line : "";
  if (name.empty() || name[0] == '?') return fallback;
  for (std::size_t at; (at = name.find("(anonymous namespace)::")) != std::string::npos;) name.erase(at, 23);
  if (const auto ns = name.find("dark::"); ns != std::string::npos) name.erase(0, ns);  // drop a return type
  name = name.substr(0, name.find_first_of("<(\n"));
  if (const auto colon = name.rfind("::"); colon != std::string::npos) name.erase(0, colon + 2);
  return name + " (" + offset + ")";
}

struct Profile {
  std::mutex mutex;
  std::map<Key, Value> table;
  ~Profile() {
    std::vector<std::pair<Key, Value>> rows(table.begin(), table.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    double total = 0;
    for (const auto& r : rows) total += r.second.seconds;
    std::fprintf(stderr, "sgemm profile: %.3f s in all\n%-44s %2s %2s %6s %6s %6s %9s %9s %7s %6s\n", total, "caller",
                 "ta", "tb", "m", "n", "k", "calls", "seconds", "GFLOP/s", "share");
    std::map<std::string, std::string> names;
    for (const auto& [k, v] : rows) {
      const auto& [key, ta, tb, m, n, kk] = k;
      if (!names.count(key)) names[key] = caller_name(key);
      const std::string& caller = names[key];
      const double gflops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(kk) *
                            static_cast<double>(v.calls) / v.seconds * 1e-9;
      std::fprintf(stderr, "%-44s %2c %2c %6lld %6lld %6lld %9lld %9.4f %7.1f %5.1f%%\n", caller.c_str(), ta, tb,
                   static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(kk),
                   static_cast<long long>(v.calls), v.seconds, gflops, 100.0 * v.seconds / total);
    }
  }
};
Profile profile;
}  // namespace

extern "C" dnnl_status_t dnnl_sgemm(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K, float alpha,
                                    const float* A, dnnl_dim_t lda, const float* B, dnnl_dim_t ldb, float beta, float* C,
                                    dnnl_dim_t ldc) {
  static const Sgemm real = reinterpret_cast<Sgemm>(dlsym(RTLD_NEXT, "dnnl_sgemm"));
  void* const caller = __builtin_return_address(0);
  const auto t0 = std::chrono::steady_clock::now();
  const dnnl_status_t status = real(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Key key{caller_key(caller), transa, transb, M, N, K};
  std::lock_guard<std::mutex> lock(profile.mutex);
  Value& v = profile.table[key];
  ++v.calls;
  v.seconds += s;
  return status;
}
