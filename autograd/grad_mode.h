// Grad mode: while off (inside a NoGradGuard, and during backward) no op is recorded.
#pragma once

namespace dark {

bool grad_enabled();
void set_grad_enabled(bool enabled);

class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Records again inside a backward (activation checkpointing's recomputation).
class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(grad_enabled()) { set_grad_enabled(true); }
  ~EnableGradGuard() { set_grad_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace dark
