// Verdicts reached once per key for the whole process, without serialising the work that
// reaches them: the bf16 kernels' self-checks (bf16_reference_check.h) run GPU work (kernels,
// read-backs) to decide, and one lock held across it would make every thread of the process
// that meets a new configuration, on any device, wait for the others' checks.
// Header-only and free of CUDA, so that the CPU tests cover it (tests/test_once_verdicts.cpp).
#pragma once
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>

namespace dark::cuda {

template <class Key>
class OnceVerdicts {
 public:
  // The verdict for `key`, if one was reached.
  std::optional<bool> find(const Key& key) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = entries_.find(key);
    return it == entries_.end() ? std::nullopt : it->second.verdict;
  }

  // The verdict for `key`: `decide`'s, run at the first call for the key without the lock, so
  // calls for other keys go on meanwhile. A call for the same key while its verdict is being
  // reached waits for it. When `decide` throws, the exception passes to its caller and the key
  // stays undecided (the next call decides again).
  bool get(const Key& key, const std::function<bool()>& decide) {
    std::unique_lock<std::mutex> lock(mutex_);
    Entry& entry = entries_[key];  // std::map: the reference survives other insertions
    decided_.wait(lock, [&] { return !entry.deciding; });
    if (entry.verdict) return *entry.verdict;
    entry.deciding = true;
    lock.unlock();
    std::optional<bool> verdict;
    try {
      verdict = decide();
    } catch (...) {
      finish(entry, std::nullopt);
      throw;
    }
    finish(entry, verdict);
    return *verdict;
  }

 private:
  struct Entry {
    std::optional<bool> verdict;
    bool deciding = false;
  };

  void finish(Entry& entry, std::optional<bool> verdict) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      entry.verdict = verdict;
      entry.deciding = false;
    }
    decided_.notify_all();
  }

  mutable std::mutex mutex_;
  std::condition_variable decided_;
  std::map<Key, Entry> entries_;
};

// Keys met before, for a message said once per key (a check that cannot run inside a graph
// capture says so at the key's first such call).
template <class Key>
class FirstTimes {
 public:
  // True at the first call for `key`, false after.
  bool first(const Key& key) {
    const std::lock_guard<std::mutex> lock(mutex_);
    return seen_.insert(key).second;
  }

 private:
  std::mutex mutex_;
  std::set<Key> seen_;
};

}  // namespace dark::cuda
