// The rules between attention keys (see config.h).
#include "attention/config.h"

#include "core/error.h"

namespace dark::attention {

namespace {
[[noreturn]] void fail(const std::string& path, const std::string& message) {
  throw Error(str("config: ", path, ": ", message));
}
}  // namespace

void validate(const AttentionConfig& a, std::int64_t head_dim, const std::string& prefix) {
  if (a.darkformer.rank > head_dim) {
    fail(prefix + ".darkformer.rank",
         str(a.darkformer.rank, " exceeds the head dimension model.d_model / model.n_heads = ", head_dim));
  }
  if (a.mode == Mode::exact && a.kind == Kind::lfk) {
    fail(prefix + ".mode",
         "\"exact\" cannot be used with kind \"lfk\": LFK learns its feature map, so there is no fixed "
         "kernel to evaluate exactly");
  }
  if (a.exact_window > 0 && (a.kind == Kind::softmax || a.mode == Mode::exact)) {
    fail(prefix + ".exact_window",
         a.kind == Kind::softmax
             ? std::string("needs a random-feature kind (performer, lfk, darkformer): softmax is exact at every "
                           "distance already")
             : std::string("needs mode \"linear\": mode \"exact\" evaluates every key exactly already"));
  }
  if (a.far_field == FarField::none && a.exact_window == 0) {
    fail(prefix + ".far_field",
         "\"none\" needs an exact window (exact_window > 0): without one the layer would attend to no key");
  }
  if (a.window_balance && (a.exact_window == 0 || a.far_field == FarField::none)) {
    fail(prefix + ".window_balance",
         "weighs the exact window against the random features: it needs both (exact_window > 0, far_field "
         "\"features\")");
  }
  if (a.proposal != Proposal::variance_optimal) return;
  if (a.kind != Kind::performer && a.kind != Kind::darkformer) {
    fail(prefix + ".proposal",
         str("\"variance_optimal\" cannot be used with kind \"", enum_name(a.kind),
             "\": only performer and darkformer draw random features (lfk learns them, softmax has none)"));
  }
  if (a.mode == Mode::exact) {
    fail(prefix + ".proposal",
         "\"variance_optimal\" cannot be used with mode \"exact\": exact attention draws no features");
  }
}

}  // namespace dark::attention
