// darkformer_bench: runs the selected ours-vs-peer cases and prints one table of ratios
// (case | ours | peer | ratio | target | pass/fail), optionally also as JSON.
//
// Exit codes: 0 when every case ran and validated (below-target ratios are reported, not
// fatal, unless --strict), 1 when a case threw or its result was wrong (or --strict and a
// ratio is below target), 2 on a bad command line.
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "bench/harness.h"
#include "core/error.h"

#ifndef DARK_BENCH_BUILD_TYPE
#define DARK_BENCH_BUILD_TYPE "unknown"
#endif

namespace dark::bench {
namespace {

struct CommandLine {
  Options timing;
  bool quick = false;
  bool strict = false;
  bool list = false;
  std::vector<std::string> filters;  // run a case when its name contains any of them
  std::string json_path;
};

void print_usage(std::ostream& os) {
  const Options defaults;
  os << "usage: darkformer_bench [flags]\n"
        "Times darkformer ops against a peer on the same data and prints one table of\n"
        "throughput ratios (ours / peer).\n\n"
        "flags:\n"
        "  --quick          3 repetitions and a short warm-up, for CI smoke runs (default: off, "
     << defaults.reps << " repetitions)\n"
     << "  --reps N         timed repetitions per side, N >= 1 (default: " << defaults.reps
     << "; 3 with --quick)\n"
     << "  --filter SUBSTR  run only cases whose name contains SUBSTR; repeatable, any may match\n"
        "                   (default: all cases)\n"
        "  --list           print the case names and exit (default: off)\n"
        "  --json PATH      also write the results as JSON to PATH (default: none)\n"
        "  --strict         exit 1 when any ratio is below its target (default: off, report only)\n"
        "  --help           print this message and exit\n\n"
        "Each repetition runs at least "
     << defaults.min_rep_seconds * 1e3
     << " ms; times are per call (median, [min..max] over repetitions).\n"
        "Threads: OMP_NUM_THREADS (both sides use the same OpenMP runtime).\n";
}

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "darkformer_bench: " << message << "\n\n";
  print_usage(std::cerr);
  std::exit(2);
}

CommandLine parse(int argc, char** argv) {
  CommandLine cl;
  int reps = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      print_usage(std::cout);
      std::exit(0);
    } else if (arg == "--quick") {
      cl.quick = true;
    } else if (arg == "--strict") {
      cl.strict = true;
    } else if (arg == "--list") {
      cl.list = true;
    } else if (arg == "--filter") {
      cl.filters.push_back(value());
    } else if (arg == "--json") {
      cl.json_path = value();
    } else if (arg == "--reps") {
      const std::string text = value();
      char* end = nullptr;
      const long n = std::strtol(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || n < 1 || n > 1000)
        usage_error("--reps wants an integer in [1, 1000], got '" + text + "'");
      reps = static_cast<int>(n);
    } else {
      usage_error("unknown flag '" + arg + "'");
    }
  }
  if (cl.quick) {
    cl.timing.reps = 3;
    cl.timing.warmup_seconds = 0.05;
  }
  if (reps > 0) cl.timing.reps = reps;
  return cl;
}

bool selected(const CommandLine& cl, const std::string& name) {
  if (cl.filters.empty()) return true;
  for (const std::string& f : cl.filters)
    if (name.find(f) != std::string::npos) return true;
  return false;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

// 1-minute load average: on a shared machine other processes distort every ratio.
double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  in >> load;
  return load;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// Median time with min..max, all in the median's unit: "2.013 ms [1.980..2.100]".
std::string time_range(const Stats& s) {
  double scale = 1;
  const char* unit = "s";
  if (s.median_s < 1e-3) {
    scale = 1e6;
    unit = "us";
  } else if (s.median_s < 1) {
    scale = 1e3;
    unit = "ms";
  }
  auto num = [&](double v) {
    const double x = v * scale;
    return fixed(x, x < 10 ? 3 : x < 100 ? 2 : 1);
  };
  return num(s.median_s) + " " + unit + " [" + num(s.min_s) + ".." + num(s.max_s) + "]";
}

std::string side_cell(double rate, const std::string& unit, const Stats& s) {
  return fixed(rate, 1) + " " + unit + "  " + time_range(s);
}

std::string verdict(const Row& r) {
  if (!r.error.empty()) return "ERROR";
  return r.passed() ? "pass" : "FAIL";
}

void print_table(const std::vector<Row>& rows) {
  const std::vector<std::string> header = {"case", "ours (median)", "peer (median)", "ratio",
                                           "target", "pass/fail"};
  std::vector<std::vector<std::string>> cells;
  for (const Row& r : rows) {
    if (!r.error.empty()) {
      cells.push_back({r.name, "-", "-", "-", r.target > 0 ? ">= " + fixed(r.target, 2) : "-",
                       verdict(r)});
      continue;
    }
    cells.push_back({r.name, side_cell(r.ours_rate(), r.unit, r.ours),
                     side_cell(r.peer_rate(), r.unit, r.peer) + "  " + r.peer_name,
                     fixed(r.ratio(), 2), ">= " + fixed(r.target, 2), verdict(r)});
  }
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& row : cells) width[c] = std::max(width[c], row[c].size());
  }
  auto print_line = [&](const std::vector<std::string>& row) {
    for (std::size_t c = 0; c < row.size(); ++c) {
      const bool right = c >= 3 && c <= 4;  // ratio and target: numbers
      const bool last = c + 1 == row.size();
      const std::string pad(last ? 0 : width[c] - row[c].size(), ' ');
      std::cout << (c ? " | " : "") << (right ? pad + row[c] : row[c] + pad);
    }
    std::cout << "\n";
  };
  print_line(header);
  std::size_t total = 3 * (header.size() - 1);
  for (std::size_t w : width) total += w;
  std::cout << std::string(total, '-') << "\n";
  for (const auto& row : cells) print_line(row);
  for (const Row& r : rows)
    if (!r.error.empty()) std::cout << "error in " << r.name << ": " << r.error << "\n";
}

nlohmann::json stats_json(const Stats& s, double rate) {
  return {{"median_s", s.median_s}, {"min_s", s.min_s}, {"max_s", s.max_s},
          {"reps", s.reps},         {"inner", s.inner}, {"rate", rate}};
}

void write_json(const std::string& path, const CommandLine& cl, const std::vector<Row>& rows) {
  nlohmann::json out;
  const dnnl_version_t* dnnl = dnnl_version();
  out["meta"] = {{"cpu", cpu_model()},
                 {"omp_max_threads", omp_get_max_threads()},
                 {"onednn", str(dnnl->major, ".", dnnl->minor, ".", dnnl->patch)},
                 {"build_type", DARK_BENCH_BUILD_TYPE},
                 {"reps", cl.timing.reps},
                 {"min_rep_seconds", cl.timing.min_rep_seconds},
                 {"quick", cl.quick},
                 {"load_average_1min", load_average()},
                 {"unix_time", static_cast<long long>(std::time(nullptr))}};
  out["cases"] = nlohmann::json::array();
  for (const Row& r : rows) {
    nlohmann::json c = {{"name", r.name},     {"peer", r.peer_name}, {"unit", r.unit},
                        {"target", r.target}, {"pass", r.passed()},  {"error", r.error}};
    if (r.error.empty()) {
      c["ours"] = stats_json(r.ours, r.ours_rate());
      c["peer_stats"] = stats_json(r.peer, r.peer_rate());
      c["ratio"] = r.ratio();
    }
    out["cases"].push_back(c);
  }
  std::ofstream file(path);
  file << out.dump(2) << "\n";
  if (!file) {
    std::cerr << "darkformer_bench: could not write " << path << "\n";
    std::exit(1);
  }
}

int run(int argc, char** argv) {
  const CommandLine cl = parse(argc, argv);
  std::vector<Case> cases;
  add_matmul_cases(cases);
  add_elementwise_cases(cases);

  if (cl.list) {
    for (const Case& c : cases) std::cout << c.name << "\n";
    return 0;
  }
  std::vector<const Case*> chosen;
  for (const Case& c : cases)
    if (selected(cl, c.name)) chosen.push_back(&c);
  if (chosen.empty()) usage_error("no case matches the filter (see --list)");

  const dnnl_version_t* dnnl = dnnl_version();
  std::cout << "darkformer_bench: cpu " << cpu_model() << " | OpenMP threads "
            << omp_get_max_threads() << " | oneDNN " << dnnl->major << "." << dnnl->minor << "."
            << dnnl->patch << " | build " << DARK_BENCH_BUILD_TYPE << " | " << cl.timing.reps
            << " reps >= " << cl.timing.min_rep_seconds * 1e3 << " ms each\n";
  const double load = load_average();
  if (load >= 1.0)
    std::cout << "warning: 1-min load average " << fixed(load, 2) << " at start: other processes"
              << " share the CPUs, so times are noisy (rerun when idle)\n";
  const std::string build = DARK_BENCH_BUILD_TYPE;
  if (build != "Release" && build != "RelWithDebInfo")
    std::cout << "warning: not an optimised build (" << build << "); numbers mean little\n";

  NoGradGuard no_grad;
  std::vector<Row> rows;
  for (const Case* c : chosen) {
    std::cout << "running " << c->name << " ..." << std::flush;
    Row row;
    try {
      row = c->run(cl.timing);
    } catch (const std::exception& e) {
      row.name = c->name;
      row.error = e.what();
    }
    if (row.error.empty())
      std::cout << " ratio " << fixed(row.ratio(), 2) << "\n";
    else
      std::cout << " error\n";
    rows.push_back(std::move(row));
  }

  std::cout << "\n";
  print_table(rows);
  if (!cl.json_path.empty()) write_json(cl.json_path, cl, rows);

  int failed = 0, errors = 0;
  for (const Row& r : rows) {
    errors += !r.error.empty();
    failed += r.error.empty() && !r.passed();
  }
  std::cout << "\n" << rows.size() - failed - errors << " pass, " << failed
            << " below target, " << errors << " errors\n";
  return errors > 0 || (cl.strict && failed > 0) ? 1 : 0;
}

}  // namespace
}  // namespace dark::bench

int main(int argc, char** argv) { return dark::bench::run(argc, argv); }
