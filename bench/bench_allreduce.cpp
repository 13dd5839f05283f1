// darkformer_bench_allreduce: all-reduce bandwidth of our mpi communicator (blocking
// all_reduce of f32: a job on its communication thread) against raw MPI_Allreduce on the same
// buffer, sizes 1 KiB ... 256 MiB in powers of 4. An MPI program: run it under
// `mpirun -np N` (scripts/bench_dist.sh does). Rank 0 prints the table.
//
// Method (nccl-tests' measures): per size, both sides are checked on exact data first, then
// warmed up, then timed in alternating repetitions (ours, MPI, MPI, ours, ...) of `inner`
// calls each, `inner` chosen by rank 0 so a repetition lasts >= 50 ms and shared by all ranks
// (every rank must make the same calls). A repetition starts after a barrier; its time is the
// slowest rank's. Reported: the median per-call time over repetitions, algbw = bytes / time,
// busbw = algbw * 2 (W - 1) / W, and ours / MPI as a bandwidth ratio (target >= 0.9 from
// 1 MiB; below that the thread hand-off, a few microseconds, dominates).
//
// Exit: 0 when every size validated (a missed target is reported, not fatal, unless
// --strict), 1 when a result was wrong (or --strict and a target is missed), 2 on a bad
// command line.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/median.h"
#include "core/tensor.h"
#include "train/dist/communicator.h"

namespace {

using namespace dark;

struct Options {
  int reps = 7;
  std::int64_t min_bytes = 1024;
  std::int64_t max_bytes = std::int64_t{256} << 20;
  double min_rep_seconds = 0.05;
  bool strict = false;
  std::string json_path;
};

void print_usage(std::ostream& os) {
  const Options d;
  os << "usage: mpirun -np N darkformer_bench_allreduce [flags]\n"
        "All-reduce (f32, sum) bandwidth of darkformer's mpi communicator against MPI_Allreduce.\n\n"
        "  --reps N          timed repetitions per side (default "
     << d.reps << ")\n"
     << "  --min-bytes B     smallest size (default " << d.min_bytes << "); sizes grow by 4x\n"
     << "  --max-bytes B     largest size (default " << d.max_bytes << " = 256 MiB)\n"
     << "  --quick           --reps 3 --max-bytes 16 MiB, for a smoke test\n"
        "  --json PATH       also write the results as JSON (rank 0)\n"
        "  --strict          exit 1 when a ratio from 1 MiB is below 0.9\n"
        "  --help            print this message\n";
}

Options parse(int argc, char** argv, int rank) {
  Options o;
  auto fail = [&](const std::string& message) {
    if (rank == 0) {
      std::cerr << "darkformer_bench_allreduce: " << message << "\n\n";
      print_usage(std::cerr);
    }
    dist::finalize();
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto number = [&]() -> std::int64_t {
      if (i + 1 >= argc) fail(arg + " needs a value");
      char* end = nullptr;
      const long long v = std::strtoll(argv[++i], &end, 10);
      if (*end != '\0' || v < 1) fail(arg + " wants a positive integer, got '" + argv[i] + "'");
      return v;
    };
    if (arg == "--help" || arg == "-h") {
      if (rank == 0) print_usage(std::cout);
      dist::finalize();
      std::exit(0);
    } else if (arg == "--reps") {
      o.reps = static_cast<int>(number());
    } else if (arg == "--min-bytes") {
      o.min_bytes = number();
    } else if (arg == "--max-bytes") {
      o.max_bytes = number();
    } else if (arg == "--quick") {
      o.reps = 3;
      o.max_bytes = std::int64_t{16} << 20;
    } else if (arg == "--strict") {
      o.strict = true;
    } else if (arg == "--json") {
      if (i + 1 >= argc) fail("--json needs a value");
      o.json_path = argv[++i];
    } else {
      fail("unknown flag '" + arg + "'");
    }
  }
  return o;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find_first_not_of(" \t", line.find(':') + 1));
  return "unknown";
}

double slowest(double seconds) {
  double out = 0;
  MPI_Allreduce(&seconds, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

// Per-call seconds of `inner` calls of fn, the slowest rank's.
template <class Fn>
double time_calls(Fn& fn, std::int64_t inner) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (std::int64_t i = 0; i < inner; ++i) fn();
  return slowest((MPI_Wtime() - start) / static_cast<double>(inner));
}

// Fills t with rank-dependent small integers, all-reduces it with `reduce` and checks every
// element against the exact sum; true when right (on every rank).
template <class Reduce>
bool validate(const Tensor& t, int rank, int world, Reduce reduce) {
  float* p = t.data<float>();
  const std::int64_t n = t.numel();
  for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<float>((i + rank) % 17);
  reduce();
  int wrong = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t want = 0;
    for (int r = 0; r < world; ++r) want += (i + r) % 17;
    wrong += p[i] != static_cast<float>(want);
  }
  int any = 0;
  MPI_Allreduce(&wrong, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any == 0;
}

std::string human_bytes(std::int64_t b) {
  if (b >= (std::int64_t{1} << 20)) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

std::string human_time(double s) {
  char text[32];
  if (s < 1e-3)
    std::snprintf(text, sizeof text, "%.1f us", s * 1e6);
  else
    std::snprintf(text, sizeof text, "%.3f ms", s * 1e3);
  return text;
}

struct Row {
  std::int64_t bytes;
  std::int64_t inner;
  double ours_s, mpi_s;
  bool valid;
};

int run(int argc, char** argv) {
  // The communicator initialises MPI (MPI_THREAD_MULTIPLE); the raw side uses MPI_COMM_WORLD.
  auto comm = dist::make_communicator(dist::BackendKind::mpi, Device::cpu(), 600);
  const int rank = comm->rank(), world = comm->world_size();
  const Options opt = parse(argc, argv, rank);
  if (rank == 0) {
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string library(version);
    library = library.substr(0, library.find_first_of(",\n"));
    std::printf("darkformer_bench_allreduce: cpu %s | %d ranks | %s | %s\n", cpu_model().c_str(), world,
                library.c_str(), comm->describe().c_str());
    std::printf("f32 sum; median of %d repetitions >= %.0f ms each, slowest rank; busbw = algbw * 2(W-1)/W\n\n",
                opt.reps, opt.min_rep_seconds * 1e3);
    std::printf("%10s | %8s | %12s | %12s | %14s | %14s | %11s | %s\n", "bytes", "calls", "ours", "MPI", "ours busbw",
                "MPI busbw", "ours / MPI", "target");
    std::printf("%s\n", std::string(112, '-').c_str());
    std::fflush(stdout);
  }
  std::vector<Row> rows;
  bool all_valid = true, targets_met = true;
  for (std::int64_t bytes = opt.min_bytes; bytes <= opt.max_bytes; bytes *= 4) {
    const std::int64_t n = bytes / 4;
    Tensor buf = Tensor::zeros({n}, DType::f32);
    float* p = buf.data<float>();
    auto ours = [&] { comm->all_reduce(buf); };
    auto theirs = [&] { MPI_Allreduce(MPI_IN_PLACE, p, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); };
    const bool valid = validate(buf, rank, world, ours) && validate(buf, rank, world, theirs);
    all_valid = all_valid && valid;
    std::fill(p, p + n, 0.0f);  // sums of zeros stay finite however often repeated
    for (int i = 0; i < 2; ++i) ours(), theirs();
    // Calls per repetition: from rank 0's (slowest-rank) estimate, the same on every rank.
    const double estimate = std::min(time_calls(ours, 3), time_calls(theirs, 3));
    std::int64_t inner = std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil(opt.min_rep_seconds / estimate)), 1, 20000);
    MPI_Bcast(&inner, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    std::vector<double> t_ours, t_mpi;
    for (int r = 0; r < opt.reps; ++r) {
      if (r % 2 == 0) {
        t_ours.push_back(time_calls(ours, inner));
        t_mpi.push_back(time_calls(theirs, inner));
      } else {
        t_mpi.push_back(time_calls(theirs, inner));
        t_ours.push_back(time_calls(ours, inner));
      }
    }
    const Row row{bytes, inner, dark::median(t_ours), dark::median(t_mpi), valid};
    rows.push_back(row);
    const double factor = world > 1 ? 2.0 * (world - 1) / world : 1.0;
    const double ratio = row.mpi_s / row.ours_s;
    const bool has_target = bytes >= (std::int64_t{1} << 20);
    const bool met = !has_target || ratio >= 0.9;
    targets_met = targets_met && met;
    if (rank == 0) {
      char ours_bw[32], mpi_bw[32];
      std::snprintf(ours_bw, sizeof ours_bw, "%.2f GB/s", bytes / row.ours_s * factor * 1e-9);
      std::snprintf(mpi_bw, sizeof mpi_bw, "%.2f GB/s", bytes / row.mpi_s * factor * 1e-9);
      std::printf("%10s | %8lld | %12s | %12s | %14s | %14s | %10.2fx | %s\n", human_bytes(bytes).c_str(),
                  static_cast<long long>(inner), human_time(row.ours_s).c_str(), human_time(row.mpi_s).c_str(), ours_bw,
                  mpi_bw, ratio, !valid ? "WRONG RESULT" : !has_target ? "-" : met ? ">= 0.9 pass" : ">= 0.9 FAIL");
      std::fflush(stdout);
    }
  }
  if (rank == 0 && !opt.json_path.empty()) {
    nlohmann::json out;
    out["meta"] = {{"cpu", cpu_model()}, {"ranks", world}, {"communicator", comm->describe()}, {"reps", opt.reps}};
    out["rows"] = nlohmann::json::array();
    for (const Row& r : rows)
      out["rows"].push_back({{"bytes", r.bytes}, {"calls", r.inner}, {"ours_s", r.ours_s}, {"mpi_s", r.mpi_s},
                             {"ratio", r.mpi_s / r.ours_s}, {"valid", r.valid}});
    std::ofstream(opt.json_path) << out.dump(1) << "\n";
  }
  if (rank == 0)
    std::printf("\n%s; %s\n", all_valid ? "every result exact" : "WRONG RESULTS",
                targets_met ? "ours / MPI >= 0.9 at every size from 1 MiB" : "a ratio from 1 MiB is below 0.9");
  comm.reset();
  dist::finalize();
  return !all_valid || (opt.strict && !targets_met) ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "darkformer_bench_allreduce: %s\n", e.what());
    dark::dist::abort_job(1);
  }
}
