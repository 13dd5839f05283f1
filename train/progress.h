// What people read while long work runs: durations ("45s", "3m07s", "2h05m") and a
// progress bar ("[#####...............]"). One spelling for the trainer and the sweep.
#pragma once
#include <cstdint>
#include <string>

namespace dark::train {

// Rounded to whole seconds: "45s" below a minute, "3m07s" below an hour, then "2h05m".
std::string duration_text(double seconds);

// `width` cells between brackets, filled in proportion to done / total.
std::string progress_bar(std::int64_t done, std::int64_t total, int width = 20);

}  // namespace dark::train
