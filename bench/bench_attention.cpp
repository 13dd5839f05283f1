// darkformer_bench_attention: forward + backward time and peak memory of the attention
// kernels against sequence length, for the four kinds (softmax, performer, lfk, darkformer)
// at head dim 64 and m random features. It is the darkformer side of
// scripts/bench_attention.sh (bench/torch_attention.py is the PyTorch FAVOR+ side).
// A benchmark, not a test: it is not registered with CTest.
//
// One configuration = (kind, m, L): the kernel is built as the model builds it,
// attention::make_factory(config)(nn::AttentionShape{H, H, D, 0, f32}), and given random
// q, k, v (B, L, H, D), N(0, 1) entries, requiring grad (its own parameters, DARKFormer's M
// and LFK's W, require grad as in training). One call = zero the gradients, out =
// kernel->forward(q, k, v), backward(out, dout) with a fixed random dout (the gradient of
// sum(out * dout)).
//
// Timing, as bench/harness.h does it for ours against a peer: configurations that are
// compared are timed in the same process, alternating. For each L one child process (this
// binary with --group) builds every kind at that L, warms each up, then runs R rounds; in a
// round each configuration runs N calls (N so that it lasts at least --min-rep-ms), the
// order rotating from round to round, so a background load that comes and goes hits all of
// them alike. Reported: the median per-call time over the rounds (min and max too). R is
// --reps, 3 when one call takes 1 s or more. The group of the longest L also re-times the
// random-feature kinds at L = 2048 as references, so t(32768) / t(2048) is a ratio of
// times taken in the same rounds (the table's 2048 row comes from the 2048 group).
//
// Memory: the caching allocator has no peak reset, so each configuration's memory is
// measured in a fresh child (--one --memory-only): the allocator's peak bytes in use during
// one forward + backward minus the bytes in use before it (q, k, v, dout and the kernel's
// parameters): everything the pass itself allocates, gradients included; also the growth
// of the peak RSS over that call.
//
// Exact window (--exact-window W, default 64; 0 = off): each random-feature kind at each m
// also runs with attention.exact_window = W (attention/exact_window.h), labelled kind+WW,
// timed in the same rounds as the kind without it and measured for memory in its own child,
// so the table's "t W/0" and "mem W/0" (its time and peak over the kind's at the same m and L)
// are ratios of times from the same rounds; the summary holds the worst over L 2048-32768 at
// m 64 against the targets (time <= 1.3x, memory <= 1.1x).
//
// A configuration whose predicted time (from the same kind at the previous L: quadratic for
// softmax, linear for the others) exceeds --budget-s is skipped and says so.
// --merge F1,F2,... combines the JSON of several runs (per configuration, the median of
// their medians; scripts/bench_attention.sh --rounds) and prints the same report.
//
// Output: the table and the summary lines with PASS/FAIL on stdout (progress on stderr);
// --json PATH also writes every row and summary as JSON.
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/median.h"
#include "attention/factory.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "nn/attention_kernel.h"

#ifndef DARK_BENCH_BUILD_TYPE
#define DARK_BENCH_BUILD_TYPE "unknown"
#endif

namespace {
using Clock = std::chrono::steady_clock;
using nlohmann::json;

const char* const kTool = "darkformer_bench_attention";
constexpr std::int64_t kRefLen = 2048, kBigLen = 32768, kSoftLen = 16384;
// The exact window's targets: at m = 64, over L kRefLen..kBigLen, t(W) / t(0) and mem(W) / mem(0).
constexpr std::int64_t kExactWindowM = 64;
constexpr double kExactWindowTime = 1.3, kExactWindowMemory = 1.1;

struct Args {
  std::vector<std::string> kinds = {"softmax", "performer", "lfk", "darkformer"};
  std::vector<std::int64_t> features = {64, 256};
  std::vector<std::int64_t> lens;  // empty: powers of two from min_len to max_len
  std::int64_t min_len = 256, max_len = 32768;
  int reps = 5;
  double min_rep_ms = 200;
  double warmup_ms = 300;
  double budget_s = 120;
  int threads = 0;  // 0 = OpenMP's default (OMP_NUM_THREADS)
  std::int64_t batch = 1, heads = 4, head_dim = 64, chunk = 64;
  std::int64_t window = 0;  // sliding window of every kind (0 = full causal)
  std::int64_t exact_window = 64;  // attention.exact_window of the extra configurations (0 = none)
  std::uint64_t seed = 1234;
  bool no_memory = false;
  std::string json_path;
  std::string merge;   // comma-separated JSON files of earlier runs
  std::string one;     // internal: "kind:m:L", one configuration in this process
  bool memory_only = false;
  std::string group;   // internal: "kind:m:L,...", configurations timed together
};

[[noreturn]] void usage(int code) {
  const Args d;
  (code ? std::cerr : std::cout)
      << "usage: darkformer_bench_attention [flags]\n"
         "Forward + backward time (median of repetitions) and peak memory of the attention kinds\n"
         "against sequence length; prints one table, ratios against softmax and darkformer /\n"
         "performer measured in the same rounds, and the targets with PASS/FAIL.\n\n"
         "  --kinds LIST      comma-separated kinds (default softmax,performer,lfk,darkformer)\n"
         "  --features LIST   random-feature counts m (default 64,256; softmax runs once)\n"
         "  --lens LIST       sequence lengths (default: powers of two from --min-len to --max-len)\n"
         "  --min-len N       (default "
      << d.min_len << ")\n"
      << "  --max-len N       (default " << d.max_len << ")\n"
      << "  --reps N          timed rounds, >= 1 (default " << d.reps << "; 3 when a call takes >= 1 s)\n"
      << "  --min-rep-ms X    each configuration's share of a round lasts at least this (default " << d.min_rep_ms
      << ")\n"
      << "  --warmup-ms X     untimed calls first, at least this long (default " << d.warmup_ms << ")\n"
      << "  --budget-s S      skip a configuration predicted to take longer (default " << d.budget_s << ")\n"
      << "  --threads N       OpenMP threads (default: OMP_NUM_THREADS / all cores)\n"
         "  --batch N, --heads N, --head-dim N   shape (default 1, 4, 64; n_kv_heads = heads)\n"
         "  --chunk N         causal linear-attention chunk length (default 64, the config default)\n"
         "  --window N        sliding-window attention of N keys for every kind (default 0: full causal)\n"
         "  --exact-window W  also run each random-feature kind and m with attention.exact_window = W,\n"
         "                    timed in the same rounds as without it, with its own memory; the table\n"
         "                    shows t(W) / t(0) and mem(W) / mem(0) (default 64; 0 = off)\n"
         "  --seed N          input and feature seed (default 1234)\n"
         "  --no-memory       time only (no per-configuration memory children)\n"
         "  --merge F1,F2,..  report the median over earlier runs' JSON files instead of measuring\n"
         "  --json PATH       also write the rows and summary as JSON\n"
         "  --help            print this message\n\n"
         "Timing: one child process per L, configurations alternating round by round; memory: one\n"
         "child per configuration (the allocator's peak has no reset).\n";
  std::exit(code);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::int64_t to_int(const std::string& flag, const std::string& v, std::int64_t lo) {
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || n < lo) {
    std::cerr << kTool << ": " << flag << " wants integers >= " << lo << ", got '" << v << "'\n";
    std::exit(2);
  }
  return n;
}

double to_double(const std::string& flag, const std::string& v, double lo) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !(x >= lo)) {
    std::cerr << kTool << ": " << flag << " wants a number >= " << lo << ", got '" << v << "'\n";
    std::exit(2);
  }
  return x;
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << kTool << ": " << arg << " needs a value\n";
        usage(2);
      }
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") usage(0);
    else if (arg == "--kinds") {
      a.kinds = split(value(), ',');
      for (const auto& k : a.kinds) dark::parse_enum<dark::attention::Kind>(k, "--kinds: attention kind");  // throws on unknown kinds
    } else if (arg == "--features") {
      a.features.clear();
      for (const auto& f : split(value(), ',')) a.features.push_back(to_int(arg, f, 1));
    } else if (arg == "--lens") {
      a.lens.clear();
      for (const auto& l : split(value(), ',')) a.lens.push_back(to_int(arg, l, 1));
    } else if (arg == "--min-len") a.min_len = to_int(arg, value(), 1);
    else if (arg == "--max-len") a.max_len = to_int(arg, value(), 1);
    else if (arg == "--reps") a.reps = static_cast<int>(to_int(arg, value(), 1));
    else if (arg == "--min-rep-ms") a.min_rep_ms = to_double(arg, value(), 0);
    else if (arg == "--warmup-ms") a.warmup_ms = to_double(arg, value(), 0);
    else if (arg == "--budget-s") a.budget_s = to_double(arg, value(), 0);
    else if (arg == "--threads") a.threads = static_cast<int>(to_int(arg, value(), 1));
    else if (arg == "--batch") a.batch = to_int(arg, value(), 1);
    else if (arg == "--heads") a.heads = to_int(arg, value(), 1);
    else if (arg == "--head-dim") a.head_dim = to_int(arg, value(), 1);
    else if (arg == "--chunk") a.chunk = to_int(arg, value(), 1);
    else if (arg == "--window") a.window = to_int(arg, value(), 0);
    else if (arg == "--exact-window") a.exact_window = to_int(arg, value(), 0);
    else if (arg == "--seed") a.seed = static_cast<std::uint64_t>(to_int(arg, value(), 0));
    else if (arg == "--no-memory") a.no_memory = true;
    else if (arg == "--merge") a.merge = value();
    else if (arg == "--json") a.json_path = value();
    else if (arg == "--one") a.one = value();
    else if (arg == "--memory-only") a.memory_only = true;
    else if (arg == "--group") a.group = value();
    else {
      std::cerr << kTool << ": unknown flag '" << arg << "'\n";
      usage(2);
    }
  }
  if (a.lens.empty())
    for (std::int64_t L = a.min_len; L <= a.max_len; L *= 2) a.lens.push_back(L);
  std::sort(a.lens.begin(), a.lens.end());
  a.lens.erase(std::unique(a.lens.begin(), a.lens.end()), a.lens.end());
  return a;
}

double peak_rss_mib() {  // ru_maxrss is KiB on Linux
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

constexpr double kMiB = 1024.0 * 1024.0;

// One kind at one m (softmax: m = 0), with or without the exact window: a block of the table.
struct Series {
  std::string kind;
  std::int64_t m = 0, exact_window = 0;  // exact_window: attention.exact_window (0 = none)
  auto operator<=>(const Series&) const = default;
  std::string label() const { return exact_window ? kind + "+W" + std::to_string(exact_window) : kind; }
  const Series& series() const { return *this; }
};

// One configuration: a series at one L.
struct Spec : Series {
  std::int64_t L = 0;
};

// "kind:m:L" or, with the exact window, "kind:m:L:W".
Spec parse_spec(const std::string& text) {
  const auto parts = split(text, ':');
  DARK_CHECK(parts.size() == 3 || parts.size() == 4, "a configuration is kind:m:L[:W], got '", text, "'");
  dark::parse_enum<dark::attention::Kind>(parts[0], "attention kind");
  return {{parts[0], to_int("m", parts[1], 0), parts.size() == 4 ? to_int("W", parts[3], 0) : 0},
          to_int("L", parts[2], 1)};
}

std::string spec_text(const Series& s, std::int64_t L) {
  return s.kind + ":" + std::to_string(s.m) + ":" + std::to_string(L) +
         (s.exact_window ? ":" + std::to_string(s.exact_window) : "");
}

// ------------------------------------------------------------------ children
// One configuration, ready to call: its kernel, its inputs and its gradient leaves.
struct Bench {
  Spec spec;
  std::unique_ptr<dark::nn::AttentionKernel> kernel;
  dark::Tensor q, k, v, dout;
  std::vector<dark::Tensor*> leaves;
  double fwd_s = 0, bwd_s = 0;  // accumulated by call()

  Bench(const Args& a, Spec s) : spec(std::move(s)) {
    using namespace dark;
    attention::AttentionConfig config;
    config.kind = parse_enum<attention::Kind>(spec.kind, "attention kind");
    config.num_features = spec.m > 0 ? static_cast<int>(spec.m) : 64;
    config.chunk_size = static_cast<int>(a.chunk);
    config.seed = a.seed;
    config.exact_window = static_cast<int>(spec.exact_window);
    kernel = attention::make_factory(config)(nn::AttentionShape{a.heads, a.heads, a.head_dim, 0, DType::f32, a.window});
    kernel->train(true);
    DARK_CHECK(!kernel->needs_calibration(), spec.kind, " needs a calibration; the benchmark uses the default config");
    const Shape shape{a.batch, spec.L, a.heads, a.head_dim};
    q = Tensor::randn(shape, a.seed, 1);
    k = Tensor::randn(shape, a.seed, 2);
    v = Tensor::randn(shape, a.seed, 3);
    dout = Tensor::randn(shape, a.seed, 4);
    q.set_requires_grad();
    k.set_requires_grad();
    v.set_requires_grad();
    leaves = {&q, &k, &v};
    for (auto& [name, p] : kernel->named_parameters()) leaves.push_back(p);
  }
  void call() {
    for (dark::Tensor* t : leaves) t->zero_grad();
    const auto t0 = Clock::now();
    const dark::Tensor out = kernel->forward(q, k, v);
    const auto t1 = Clock::now();
    dark::backward(out, dout);
    const auto t2 = Clock::now();
    fwd_s += std::chrono::duration<double>(t1 - t0).count();
    bwd_s += std::chrono::duration<double>(t2 - t1).count();
  }
  // Sanity: the gradients are finite (an overflow would make the timing meaningless).
  void check_finite() const {
    for (const dark::Tensor* t : {&q, &k, &v}) {
      const double s = dark::sum(dark::square(t->grad())).item();
      DARK_CHECK(std::isfinite(s), spec.label(), " m=", spec.m, " L=", spec.L, ": non-finite gradient");
    }
  }
};

json spec_json(const Spec& s) {
  json j = {{"kind", s.kind}, {"m", s.kind == "softmax" ? 0 : s.m}, {"L", s.L}};
  if (s.exact_window) j["exact_window"] = s.exact_window;
  return j;
}

// After a first call that took `first` seconds: calls b until it has run at least twice and
// for --warmup-ms in all (a call of >= 1 s counts as warm at once); returns the fastest call.
double warm_up(Bench& b, const Args& a, double first) {
  double fastest = first, warm = first;
  for (int calls = 1; fastest < 1.0 && (calls < 2 || warm < a.warmup_ms * 1e-3); ++calls) {
    const auto c0 = Clock::now();
    b.call();
    const double t = std::chrono::duration<double>(Clock::now() - c0).count();
    warm += t;
    fastest = std::min(fastest, t);
  }
  return fastest;
}

// --one kind:m:L [--memory-only]: peak memory of the first call (and the timing, unless
// memory-only, as the group would take it but alone).
int run_one(const Args& a) {
  using namespace dark;
  if (a.threads > 0) omp_set_num_threads(a.threads);
  const double base_rss = peak_rss_mib();
  Bench b(a, parse_spec(a.one));
  CachingAllocator& alloc = allocator_for(Device::cpu());
  const AllocatorStats before = alloc.stats();
  const double rss_before = peak_rss_mib();
  const auto t0 = Clock::now();
  b.call();
  double fastest = std::chrono::duration<double>(Clock::now() - t0).count();
  const AllocatorStats after = alloc.stats();
  const double rss_first = peak_rss_mib();
  b.check_finite();
  json out = spec_json(b.spec);
  out["peak_mib"] = static_cast<double>(after.peak_bytes_in_use - std::min(after.peak_bytes_in_use, before.bytes_in_use)) / kMiB;
  out["inputs_mib"] = static_cast<double>(before.bytes_in_use) / kMiB;
  out["peak_rss_growth_mib"] = rss_first - rss_before;
  out["peak_rss_mib"] = rss_first;
  out["base_rss_mib"] = base_rss;
  out["first_call_ms"] = fastest * 1e3;
  if (!a.memory_only) {
    fastest = warm_up(b, a, fastest);
    const std::int64_t inner =
        std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(a.min_rep_ms * 1e-3 / std::max(fastest, 1e-9))));
    const int reps = fastest >= 1.0 ? std::min(a.reps, 3) : a.reps;
    std::vector<double> per_call, fwd, bwd;
    for (int r = 0; r < reps; ++r) {
      b.fwd_s = b.bwd_s = 0;
      const auto r0 = Clock::now();
      for (std::int64_t i = 0; i < inner; ++i) b.call();
      per_call.push_back(std::chrono::duration<double>(Clock::now() - r0).count() / static_cast<double>(inner));
      fwd.push_back(b.fwd_s / static_cast<double>(inner));
      bwd.push_back(b.bwd_s / static_cast<double>(inner));
    }
    out["ms"] = dark::median(per_call) * 1e3;
    out["ms_min"] = *std::min_element(per_call.begin(), per_call.end()) * 1e3;
    out["ms_max"] = *std::max_element(per_call.begin(), per_call.end()) * 1e3;
    out["fwd_ms"] = dark::median(fwd) * 1e3;
    out["bwd_ms"] = dark::median(bwd) * 1e3;
    out["reps"] = reps;
    out["inner"] = inner;
  }
  out["threads"] = omp_get_max_threads();
  std::cout << out.dump() << std::endl;
  return 0;
}

// --group kind:m:L,...: the configurations timed in alternating rounds; one JSON array.
int run_group(const Args& a) {
  if (a.threads > 0) omp_set_num_threads(a.threads);
  std::vector<std::unique_ptr<Bench>> benches;
  for (const auto& text : split(a.group, ',')) benches.push_back(std::make_unique<Bench>(a, parse_spec(text)));
  const std::size_t n = benches.size();
  std::vector<std::int64_t> inner(n);
  bool slow = false;
  for (std::size_t i = 0; i < n; ++i) {  // warm-up and calibration, one configuration at a time
    Bench& b = *benches[i];
    const auto c0 = Clock::now();
    b.call();
    b.check_finite();
    const double fastest = warm_up(b, a, std::chrono::duration<double>(Clock::now() - c0).count());
    inner[i] = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(a.min_rep_ms * 1e-3 / std::max(fastest, 1e-9))));
    slow = slow || fastest >= 1.0;
  }
  const int reps = slow ? std::min(a.reps, 3) : a.reps;
  std::vector<std::vector<double>> per_call(n), fwd(n), bwd(n);
  for (int r = 0; r < reps; ++r) {
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t i = (j + static_cast<std::size_t>(r)) % n;  // the order rotates
      Bench& b = *benches[i];
      b.fwd_s = b.bwd_s = 0;
      const auto r0 = Clock::now();
      for (std::int64_t c = 0; c < inner[i]; ++c) b.call();
      const double in = static_cast<double>(inner[i]);
      per_call[i].push_back(std::chrono::duration<double>(Clock::now() - r0).count() / in);
      fwd[i].push_back(b.fwd_s / in);
      bwd[i].push_back(b.bwd_s / in);
    }
  }
  json out = json::array();
  for (std::size_t i = 0; i < n; ++i) {
    json j = spec_json(benches[i]->spec);
    j["ms"] = dark::median(per_call[i]) * 1e3;
    j["ms_min"] = *std::min_element(per_call[i].begin(), per_call[i].end()) * 1e3;
    j["ms_max"] = *std::max_element(per_call[i].begin(), per_call[i].end()) * 1e3;
    j["fwd_ms"] = dark::median(fwd[i]) * 1e3;
    j["bwd_ms"] = dark::median(bwd[i]) * 1e3;
    j["reps"] = reps;
    j["inner"] = inner[i];
    j["group_size"] = n;
    j["threads"] = omp_get_max_threads();
    out.push_back(j);
  }
  std::cout << out.dump() << std::endl;
  return 0;
}

// ------------------------------------------------------------------ driver
std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "darkformer_bench_attention";
  buf[n] = '\0';
  return buf;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "unknown";
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string range_text(double lo, double hi) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "[%.2f..%.2f]", lo, hi);
  return buf;
}

// One row of the report: a configuration, or (ref_of > 0) a reference re-timed in the
// group of L = ref_of.
struct Row : Series {
  std::int64_t L = 0, ref_of = 0;
  json data = json::object();  // time and memory fields
  std::string skipped;         // why not timed
  bool timed() const { return data.contains("ms"); }
  bool has_memory() const { return data.contains("peak_mib"); }
  double ms() const { return data.value("ms", 0.0); }
  double mib() const { return data.value("peak_mib", 0.0); }
  json to_json() const {
    json j = data;
    j["kind"] = kind;
    j["m"] = m;
    j["L"] = L;
    if (exact_window) j["exact_window"] = exact_window;
    if (ref_of) j["ref_of"] = ref_of;
    if (!skipped.empty()) j["skipped"] = skipped;
    return j;
  }
};

struct Meta {
  std::string cpu, date, load_before, load_after, wait_policy;
  int threads = 0;
  double total_s = 0;
  json extra = json::object();
};

std::string run_command(const std::string& cmd, int& status) {
  std::string text;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) {
    status = -1;
    return text;
  }
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) text += buf;
  status = pclose(pipe);
  return text;
}

std::string child_flags(const Args& a) {
  std::ostringstream cmd;
  cmd << " --reps " << a.reps << " --min-rep-ms " << a.min_rep_ms << " --warmup-ms " << a.warmup_ms << " --batch "
      << a.batch << " --heads " << a.heads << " --head-dim " << a.head_dim << " --chunk " << a.chunk << " --window "
      << a.window << " --seed " << a.seed;
  if (a.threads > 0) cmd << " --threads " << a.threads;
  return cmd.str();
}

// Prints the table and the target lines; writes the JSON when asked. Returns the rows'
// summary as JSON.
json report(const Args& a, const std::vector<Row>& rows, const Meta& meta, const std::vector<Series>& series,
            const std::vector<std::int64_t>& lens) {
  auto find = [&](const Series& s, std::int64_t L, std::int64_t ref_of = 0) -> const Row* {
    for (const Row& r : rows)
      if (r.series() == s && r.L == L && r.ref_of == ref_of) return &r;
    return nullptr;
  };
  auto timed = [&](const Series& s, std::int64_t L) -> const Row* {
    const Row* r = find(s, L);
    return r && r->timed() ? r : nullptr;
  };
  const Series softmax{"softmax", 0, 0};
  // What the exact window costs: a series with it against the same kind and m without it,
  // at the same L (times from the same rounds).
  struct WindowRatios {
    std::optional<double> time, memory;
  };
  auto window_ratios = [&](const Series& s, std::int64_t L) {
    WindowRatios out;
    const Row* w = find(s, L);
    const Row* base = find(Series{s.kind, s.m, 0}, L);
    if (!w || !base) return out;
    if (w->timed() && base->timed()) out.time = w->ms() / base->ms();
    if (w->has_memory() && base->has_memory() && base->mib() > 0) out.memory = w->mib() / base->mib();
    return out;
  };
  auto ratio_text = [](const std::optional<double>& x) { return x ? fmt("%.2fx", *x) : std::string("-"); };

  char header[256];
  std::snprintf(header, sizeof header, "%-15s | %4s | %6s | %10s | %21s | %9s | %9s | %9s | %9s | %10s | %7s | %7s",
                "kind", "m", "L", "ms (med)", "[min..max]", "fwd ms", "bwd ms", "peak MiB", "RSS+ MiB", "vs softmax",
                "t W/0", "mem W/0");
  std::printf("%s\n%s\n", header, std::string(std::strlen(header), '-').c_str());
  json window_rows = json::array();  // the ratio columns, for --json
  for (const Series& s : series) {
    for (std::int64_t L : lens) {
      const Row* r = find(s, L);
      const std::string ms_text = s.m ? std::to_string(s.m) : "-";
      const std::string mib = r && r->has_memory() ? fmt("%.1f", r->mib()) : "-";
      const std::string rss = r && r->has_memory() ? fmt("%.0f", r->data["peak_rss_growth_mib"].get<double>()) : "-";
      std::string t_w, mem_w;  // blank for series without the window
      if (s.exact_window) {
        const WindowRatios w = window_ratios(s, L);
        t_w = ratio_text(w.time);
        mem_w = ratio_text(w.memory);
        window_rows.push_back({{"kind", s.kind}, {"m", s.m}, {"L", L}, {"exact_window", s.exact_window},
                               {"time_ratio", w.time ? json(*w.time) : json(nullptr)},
                               {"memory_ratio", w.memory ? json(*w.memory) : json(nullptr)}});
      }
      if (!r || !r->timed()) {
        std::printf("%-15s | %4s | %6lld | %s%s\n", s.label().c_str(), ms_text.c_str(), static_cast<long long>(L),
                    r ? r->skipped.c_str() : "not run", r && r->has_memory() ? ("; peak " + mib + " MiB").c_str() : "");
        continue;
      }
      const json& j = r->data;
      const Row* sm = timed(softmax, L);
      const std::string vs = s.kind == "softmax" ? "1.00x" : sm ? fmt("%.2fx", sm->ms() / r->ms()) : "-";
      std::printf("%-15s | %4s | %6lld | %10.2f | %21s | %9.2f | %9.2f | %9s | %9s | %10s | %7s | %7s\n",
                  s.label().c_str(), ms_text.c_str(), static_cast<long long>(L), r->ms(),
                  range_text(j["ms_min"].get<double>(), j["ms_max"].get<double>()).c_str(), j["fwd_ms"].get<double>(),
                  j["bwd_ms"].get<double>(), mib.c_str(), rss.c_str(), vs.c_str(), t_w.c_str(), mem_w.c_str());
    }
  }
  std::printf("(vs softmax: softmax time / this kind's time at the same L, timed in the same rounds; > 1 = faster)\n");
  if (!window_rows.empty())
    std::printf("(kind+WW: attention.exact_window = W; t W/0, mem W/0: its time and peak over the kind's without the\n"
                " window at the same m and L, timed in the same rounds)\n");
  for (const Row& r : rows)
    if (r.ref_of && r.timed())
      std::printf("reference, re-timed in the L=%lld rounds: %-10s m=%-4lld L=%lld  %.2f ms\n",
                  static_cast<long long>(r.ref_of), r.kind.c_str(), static_cast<long long>(r.m),
                  static_cast<long long>(r.L), r.ms());
  std::printf("\n");

  json summary = json::array();
  auto target_line = [&](const std::string& what, std::optional<double> value, const std::string& target, bool pass,
                         const std::string& note = "") {
    const std::string verdict = value ? (pass ? "PASS" : "FAIL") : "n/a";
    std::printf("%-56s %8s   target %-8s %-4s%s\n", what.c_str(), value ? fmt("%.2f", *value).c_str() : "-",
                target.c_str(), verdict.c_str(), note.empty() ? "" : ("  " + note).c_str());
    summary.push_back({{"what", what}, {"value", value ? json(*value) : json(nullptr)}, {"target", target},
                       {"verdict", verdict}, {"note", note}});
  };
  // The kinds' own targets are of the series without the exact window.
  auto windowless_rf = [](const Series& s) { return s.kind != "softmax" && !s.exact_window; };
  std::printf("Targets (medians measured in this run):\n");
  for (const Series& s : series) {
    if (!windowless_rf(s)) continue;
    const Row* big = timed(s, kBigLen);
    const Row* ref = find(s, kRefLen, kBigLen);  // re-timed in the 32768 rounds
    std::optional<double> g;
    std::string note = "(linear = 16)";
    if (big && ref && ref->timed()) {
      g = big->ms() / ref->ms();
      if (const Row* table = timed(s, kRefLen))
        note = "(linear = 16; 2048 timed in the same rounds; with the table's 2048 row: " +
               fmt("%.2f", big->ms() / table->ms()) + ")";
    } else if (const Row* table = timed(s, kRefLen); big && table) {
      g = big->ms() / table->ms();
      note = "(linear = 16; 2048 and 32768 timed in different rounds)";
    }
    target_line("time t(32768)/t(2048)  " + s.kind + " m=" + std::to_string(s.m), g, "<= 20", g && *g <= 20.0, note);
  }
  for (const Series& s : series) {
    if (!windowless_rf(s)) continue;
    const Row* r = timed(s, kSoftLen);
    const Row* sm = timed(softmax, kSoftLen);
    std::optional<double> sp;
    if (r && sm) sp = sm->ms() / r->ms();
    target_line("speedup over softmax at L=16384  " + s.kind + " m=" + std::to_string(s.m), sp, ">= 5",
                sp && *sp >= 5.0);
  }
  for (std::int64_t m : a.features) {
    std::vector<double> ratios;
    std::string per_l;
    for (std::int64_t L : lens) {
      const Row* d = timed(Series{"darkformer", m, 0}, L);
      const Row* p = timed(Series{"performer", m, 0}, L);
      if (!d || !p) continue;
      ratios.push_back(d->ms() / p->ms());
      per_l += fmt(" %.0f:", static_cast<double>(L)) + fmt("%.2f", ratios.back());
    }
    // Issue 16's target: at every L (so the largest ratio counts), the median beside it.
    std::optional<double> worst;
    if (!ratios.empty()) worst = *std::max_element(ratios.begin(), ratios.end());
    target_line("darkformer / performer time, max over L  m=" + std::to_string(m), worst, "<= 1.05",
                worst && *worst <= 1.05, ratios.empty() ? "" : "(median " + fmt("%.2f", dark::median(ratios)) + ")");
    if (!per_l.empty()) std::printf("    per L:%s\n", per_l.c_str());
  }
  // The exact window's targets: at m = 64 and every L in 2048..32768 (the largest ratio
  // counts), time and memory against the same kind without it.
  struct Measure {
    const char* name;
    double limit;
    std::optional<double> WindowRatios::*field;
  };
  for (const Series& s : series) {
    if (!s.exact_window || s.m != kExactWindowM) continue;
    for (const Measure& measure : {Measure{"time", kExactWindowTime, &WindowRatios::time},
                                   Measure{"memory", kExactWindowMemory, &WindowRatios::memory}}) {
      std::vector<double> ratios;
      std::string per_l;
      for (std::int64_t L : lens) {
        const std::optional<double> x = window_ratios(s, L).*measure.field;
        if (L < kRefLen || L > kBigLen || !x) continue;
        ratios.push_back(*x);
        per_l += fmt(" %.0f:", static_cast<double>(L)) + fmt("%.2f", *x);
      }
      std::optional<double> worst;
      if (!ratios.empty()) worst = *std::max_element(ratios.begin(), ratios.end());
      target_line("exact window W=" + std::to_string(s.exact_window) + " " + measure.name + " / W=0  " + s.kind +
                      " m=" + std::to_string(s.m),
                  worst, "<= " + fmt("%.1f", measure.limit), worst && *worst <= measure.limit,
                  ratios.empty() ? "(no L in 2048-32768 measured)"
                                 : "(max over " + std::to_string(ratios.size()) + " L in 2048-32768; median " +
                                       fmt("%.2f", dark::median(ratios)) + ")");
      if (!per_l.empty()) std::printf("    per L:%s\n", per_l.c_str());
    }
  }
  for (const Series& s : series) {
    if (!windowless_rf(s)) continue;
    std::optional<std::int64_t> cross;
    bool stays = true;
    for (std::int64_t L : lens) {
      const Row* r = timed(s, L);
      const Row* sm = timed(softmax, L);
      if (!r || !sm) continue;
      if (r->ms() < sm->ms()) {
        if (!cross) cross = L;
      } else if (cross) {
        stays = false;
      }
    }
    const std::string what = "crossover vs softmax  " + s.kind + " m=" + std::to_string(s.m);
    std::printf("%-56s %8s   (smallest L where it beats softmax%s)\n", what.c_str(),
                cross ? std::to_string(*cross).c_str() : "none", cross && !stays ? "; NOT at every longer L" : "");
    summary.push_back({{"what", what}, {"value", cross ? json(*cross) : json(nullptr)}});
  }
  for (const Series& s : series) {
    if (s.exact_window) continue;
    const Row* big = find(s, kBigLen);
    const Row* ref = find(s, kRefLen);
    std::optional<double> g;
    if (big && ref && big->has_memory() && ref->has_memory() && ref->mib() > 0) g = big->mib() / ref->mib();
    target_line("memory mem(32768)/mem(2048)  " + s.kind + (s.m ? " m=" + std::to_string(s.m) : ""), g, "<= 20",
                g && *g <= 20.0, "(linear = 16)");
  }
  std::printf("\n%s; load average after: %s\n",
              meta.total_s > 0 ? (std::to_string(rows.size()) + " rows in " + fmt("%.0f", meta.total_s) + " s").c_str()
                               : "merged runs",
              meta.load_after.c_str());

  if (!a.json_path.empty()) {
    json jrows = json::array();
    for (const Row& r : rows) jrows.push_back(r.to_json());
    json doc = {{"side", "darkformer"},
                {"cpu", meta.cpu},
                {"cores", sysconf(_SC_NPROCESSORS_ONLN)},
                {"threads", meta.threads},
                {"omp_wait_policy", meta.wait_policy},
                {"date", meta.date},
                {"build_type", DARK_BENCH_BUILD_TYPE},
                {"load_before", meta.load_before},
                {"load_after", meta.load_after},
                {"total_s", meta.total_s},
                {"shape", {{"batch", a.batch}, {"heads", a.heads}, {"head_dim", a.head_dim}, {"chunk", a.chunk},
                           {"window", a.window}, {"exact_window", a.exact_window}}},
                {"rows", jrows},
                {"exact_window_ratios", window_rows},
                {"summary", summary}};
    for (auto& [k, v] : meta.extra.items()) doc[k] = v;
    std::ofstream(a.json_path) << doc.dump(1) << "\n";
  }
  return summary;
}

// Softmax once, with m = 0; each random-feature kind at each m, followed by the same with the
// exact window (--exact-window > 0).
std::vector<Series> series_of(const Args& a) {
  std::vector<Series> series;
  for (const auto& kind : a.kinds) {
    if (kind == "softmax") series.push_back({kind, 0, 0});
    else
      for (std::int64_t m : a.features) {
        series.push_back({kind, m, 0});
        if (a.exact_window > 0) series.push_back({kind, m, a.exact_window});
      }
  }
  return series;
}

Meta current_meta(const Args& a) {
  Meta meta;
  meta.threads = a.threads > 0 ? a.threads : omp_get_max_threads();
  const std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M", std::localtime(&now));
  meta.date = date;
  meta.cpu = cpu_model();
  meta.load_before = load_average();
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  meta.wait_policy = wait_policy ? wait_policy : "unset";
  return meta;
}

void print_header(const Args& a, const Meta& meta, const char* what) {
  std::printf("darkformer_bench_attention (%s build): B=%lld, H=%lld (kv %lld), head dim %lld, f32, chunk %lld%s%s\n",
              DARK_BENCH_BUILD_TYPE, static_cast<long long>(a.batch), static_cast<long long>(a.heads),
              static_cast<long long>(a.heads), static_cast<long long>(a.head_dim), static_cast<long long>(a.chunk),
              a.window > 0 ? (", window " + std::to_string(a.window)).c_str() : "", what);
  if (a.exact_window > 0)
    std::printf("exact window: each random-feature kind also with attention.exact_window = %lld (kind+W%lld)\n",
                static_cast<long long>(a.exact_window), static_cast<long long>(a.exact_window));
  std::printf("CPU: %s, %ld online cores, %d OpenMP threads (OMP_WAIT_POLICY=%s); %s; load average before: %s\n",
              meta.cpu.c_str(), sysconf(_SC_NPROCESSORS_ONLN), meta.threads, meta.wait_policy.c_str(),
              meta.date.c_str(), meta.load_before.c_str());
  std::printf("time = forward + backward(out, dout) per call, median over rounds (>= %.0f ms per configuration "
              "each); peak = allocator bytes in use during one pass beyond its inputs\n\n",
              a.min_rep_ms);
  std::fflush(stdout);
}

int run_driver(const Args& a) {
  const std::string exe = self_exe();
  Meta meta = current_meta(a);
  print_header(a, meta, "");
  const auto series = series_of(a);
  const std::int64_t top = a.lens.back();
  const bool refs = top > kRefLen && std::find(a.lens.begin(), a.lens.end(), kRefLen) != a.lens.end();

  std::map<Series, std::pair<std::int64_t, double>> last;  // series -> (L, s/call)
  auto predict = [&](const Series& s, std::int64_t L) -> std::optional<double> {
    const auto prev = last.find(s);
    if (prev == last.end()) return std::nullopt;
    const double ratio = static_cast<double>(L) / static_cast<double>(prev->second.first);
    return prev->second.second * (s.kind == "softmax" ? ratio * ratio : ratio);
  };
  std::vector<Row> rows;
  int failures = 0;
  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  for (std::int64_t L : a.lens) {
    // ---- timing: every configuration at L in one child, alternating ----
    std::vector<std::size_t> group;  // indices into rows
    std::vector<std::string> specs;
    for (const Series& s : series) {
      Row row{s, L, 0, json::object(), ""};
      if (const auto per_call = predict(s, L)) {
        const double predicted = *per_call >= 1.0 ? *per_call * (1 + std::min(a.reps, 3))
                                                  : std::max(*per_call, a.warmup_ms * 1e-3) +
                                                        a.reps * std::max(*per_call, a.min_rep_ms * 1e-3);
        if (predicted > a.budget_s)
          row.skipped = "skipped (would take ~" + fmt("%.0f", predicted) + " s > --budget-s " + fmt("%.0f", a.budget_s) + ")";
      }
      rows.push_back(row);
      if (rows.back().skipped.empty()) {
        group.push_back(rows.size() - 1);
        specs.push_back(spec_text(s, L));
      }
    }
    if (refs && L == top)
      for (const Series& s : series)
        if (s.kind != "softmax" && !s.exact_window) {
          rows.push_back(Row{s, kRefLen, top, json::object(), ""});
          group.push_back(rows.size() - 1);
          specs.push_back(spec_text(s, kRefLen));
        }
    if (!group.empty()) {
      std::string list;
      for (const auto& s : specs) list += (list.empty() ? "" : ",") + s;
      std::fprintf(stderr, "[%6.0f s] L=%-6lld timing %zu configurations together ...", elapsed(),
                   static_cast<long long>(L), group.size());
      int status = 0;
      const std::string text = run_command("'" + exe + "' --group " + list + child_flags(a), status);
      std::optional<json> result;
      if (status == 0) try {
          result = json::parse(text);
        } catch (const std::exception&) {
        }
      if (!result || !result->is_array() || result->size() != group.size()) {
        std::fprintf(stderr, " FAILED (status %d)\n", status);
        for (std::size_t i : group) rows[i].skipped = "failed: timing child exited with status " + std::to_string(status);
        ++failures;
      } else {
        std::fprintf(stderr, " done\n");
        for (std::size_t g = 0; g < group.size(); ++g) {
          Row& row = rows[group[g]];
          for (auto& [k, v] : (*result)[g].items())
            if (k != "kind" && k != "m" && k != "L" && k != "exact_window") row.data[k] = v;
          if (!row.ref_of) last[row.series()] = {L, row.ms() * 1e-3};
          std::fprintf(stderr, "           %-15s m=%-4lld L=%-6lld %10.2f ms%s\n", row.label().c_str(),
                       static_cast<long long>(row.m), static_cast<long long>(row.L), row.ms(),
                       row.ref_of ? "  (reference for the growth ratio)" : "");
        }
      }
    }
    // ---- memory: one child per configuration ----
    if (a.no_memory) continue;
    for (Row& row : rows) {
      if (row.L != L || row.ref_of) continue;
      const double one_call = row.timed() ? row.ms() * 1e-3 : predict(row, L).value_or(0);
      if (one_call > a.budget_s) continue;
      int status = 0;
      const std::string text =
          run_command("'" + exe + "' --one " + spec_text(row, L) + " --memory-only" + child_flags(a), status);
      try {
        if (status != 0) throw std::runtime_error("status " + std::to_string(status));
        const json j = json::parse(text);
        for (const char* k : {"peak_mib", "inputs_mib", "peak_rss_growth_mib", "peak_rss_mib", "base_rss_mib"})
          row.data[k] = j.at(k);
        std::fprintf(stderr, "           %-15s m=%-4lld L=%-6lld peak %.1f MiB\n", row.label().c_str(),
                     static_cast<long long>(row.m), static_cast<long long>(L), row.mib());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "           %-15s m=%-4lld L=%-6lld memory FAILED: %s\n", row.label().c_str(),
                     static_cast<long long>(row.m), static_cast<long long>(L), e.what());
        ++failures;
      }
    }
  }
  meta.total_s = elapsed();
  meta.load_after = load_average();
  report(a, rows, meta, series, a.lens);
  return failures ? 1 : 0;
}

// --merge: per configuration, the median of the runs' medians (min of mins, max of maxes);
// memory from the first run that measured it.
int run_merge(const Args& a) {
  const auto files = split(a.merge, ',');
  std::vector<json> docs;
  for (const auto& f : files) {
    std::ifstream in(f);
    DARK_CHECK(in.good(), "--merge: cannot read ", f);
    docs.push_back(json::parse(in));
  }
  DARK_CHECK(!docs.empty(), "--merge wants at least one file");
  std::vector<Row> rows;
  using Key = std::tuple<Series, std::int64_t, std::int64_t>;  // series, L, ref_of
  std::map<Key, std::vector<json>> by_key;
  std::vector<Key> order;
  std::vector<std::int64_t> lens;
  std::vector<Series> series;
  for (const json& d : docs)
    for (const json& r : d["rows"]) {
      const Series s{r["kind"].get<std::string>(), r["m"].get<std::int64_t>(), r.value("exact_window", std::int64_t{0})};
      const Key key{s, r["L"].get<std::int64_t>(), r.value("ref_of", std::int64_t{0})};
      if (!by_key.count(key)) order.push_back(key);
      by_key[key].push_back(r);
      if (!r.contains("ref_of")) {
        if (std::find(lens.begin(), lens.end(), std::get<1>(key)) == lens.end()) lens.push_back(std::get<1>(key));
        if (std::find(series.begin(), series.end(), s) == series.end()) series.push_back(s);
      }
    }
  std::sort(lens.begin(), lens.end());
  for (const auto& key : order) {
    Row row{std::get<0>(key), std::get<1>(key), std::get<2>(key), json::object(), ""};
    std::vector<double> ms, fwd, bwd;
    double lo = 1e300, hi = 0;
    int reps = 0;
    for (const json& r : by_key[key]) {
      if (r.contains("ms")) {
        ms.push_back(r["ms"].get<double>());
        fwd.push_back(r["fwd_ms"].get<double>());
        bwd.push_back(r["bwd_ms"].get<double>());
        lo = std::min(lo, r["ms_min"].get<double>());
        hi = std::max(hi, r["ms_max"].get<double>());
        reps += r.value("reps", 0);
      } else if (row.skipped.empty() && r.contains("skipped")) {
        row.skipped = r["skipped"].get<std::string>();
      }
      if (!row.has_memory() && r.contains("peak_mib"))
        for (const char* k : {"peak_mib", "inputs_mib", "peak_rss_growth_mib", "peak_rss_mib", "base_rss_mib"})
          if (r.contains(k)) row.data[k] = r[k];
    }
    if (!ms.empty()) {
      row.data["ms"] = dark::median(ms);
      row.data["ms_min"] = lo;
      row.data["ms_max"] = hi;
      row.data["fwd_ms"] = dark::median(fwd);
      row.data["bwd_ms"] = dark::median(bwd);
      row.data["reps"] = reps;
      row.data["runs"] = ms.size();
      row.data["ms_per_run"] = ms;
      row.skipped.clear();
    }
    rows.push_back(row);
  }
  Meta meta;
  const json& first = docs.front();
  meta.cpu = first.value("cpu", "unknown");
  meta.threads = first.value("threads", 0);
  meta.wait_policy = first.value("omp_wait_policy", "unset");
  meta.date = first.value("date", "") + " .. " + docs.back().value("date", "");
  meta.load_before = first.value("load_before", "");
  meta.load_after = docs.back().value("load_after", "");
  meta.extra["merged"] = files;
  Args shape = a;
  if (first.contains("shape")) {
    shape.batch = first["shape"].value("batch", a.batch);
    shape.heads = first["shape"].value("heads", a.heads);
    shape.head_dim = first["shape"].value("head_dim", a.head_dim);
    shape.chunk = first["shape"].value("chunk", a.chunk);
    shape.window = first["shape"].value("window", a.window);
  }
  shape.features.clear();
  shape.exact_window = 0;
  for (const Series& s : series) {
    if (s.m > 0 && std::find(shape.features.begin(), shape.features.end(), s.m) == shape.features.end())
      shape.features.push_back(s.m);
    shape.exact_window = std::max(shape.exact_window, s.exact_window);
  }
  const std::string what = " -- median over " + std::to_string(docs.size()) + " runs";
  print_header(shape, meta, what.c_str());
  report(shape, rows, meta, series, lens);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse_args(argc, argv);
    if (!args.group.empty()) return run_group(args);
    if (!args.one.empty()) return run_one(args);
    if (!args.merge.empty()) return run_merge(args);
    return run_driver(args);
  } catch (const std::exception& e) {
    std::cerr << kTool << ": " << e.what() << "\n";
    return 1;
  }
}
