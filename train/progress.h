// What people read while long work runs: durations ("45s", "3m07s", "2h05m"), a progress
// bar ("[#####...............]") and the progress lines of work that may take a while. One
// spelling for the trainer, the sweep and the commands.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace dark::train {

// Rounded to whole seconds: "45s" below a minute, "3m07s" below an hour, then "2h05m".
std::string duration_text(double seconds);

// `width` cells between brackets, filled in proportion to done / total.
std::string progress_bar(std::int64_t done, std::int64_t total, int width = 20);

// Progress of work that may or may not take long (an evaluation, generation, a probe, a data
// preparation, an import), logged only when it does: a first line once `first_after` seconds
// have passed, then one every `every` seconds, and a last one at the end when any was
// logged, e.g. "evaluation: batch 12/32 [#######.............] | 3.10 s/batch | ETA 1m02s"
// ("... | 25.3 tokens/s | ..." when a unit takes under 0.1 s).
// Work that ends within `first_after` seconds prints nothing.
class ProgressLog {
 public:
  using Clock = std::function<double()>;  // seconds on a steady clock; default: std::chrono::steady_clock
  // unit and units: the singular and plural of what is counted ("batch", "batches").
  ProgressLog(std::string what, std::string unit, std::string units, std::int64_t total, double first_after = 5,
              double every = 15, Clock clock = {});
  // After `done` of the total units: logs a line (spdlog info) when one is due and returns
  // it, else returns "".
  std::string update(std::int64_t done);

 private:
  std::string what_, unit_, units_;
  std::int64_t total_;
  double first_after_, every_;
  Clock clock_;
  double start_, next_;
  bool logged_ = false;
};

}  // namespace dark::train
