// Helpers shared by the Store tests: a temporary directory, seeded values,
// a gate that holds the promotion pool's workers, and CONFIG SET of single
// store knobs.
#pragma once

#include <stdlib.h>

#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <random>
#include <string>

#include "core/config.h"
#include "store/store.h"

namespace tierkv::testing {

class TempDir {
 public:
  TempDir() {
    std::string templ = "/tmp/tierkv-store-test-XXXXXX";
    path_ = ::mkdtemp(templ.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// `n` bytes that depend only on (seed, n).
inline std::string value_for(uint64_t seed, size_t n) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed * 7919 + n);
  for (size_t j = 0; j < n; j += 8) {
    uint64_t v = rng();
    for (size_t b = 0; b < 8 && j + b < n; ++b) s[j + b] = static_cast<char>(v >> (8 * b));
  }
  return s;
}

// Holds every promotion-pool worker before its next job while closed
// (StoreHooks::before_pool_job or before_preheat_job = gate.hook()), so
// that jobs stay queued.
class PoolGate {
 public:
  std::function<void()> hook() {
    return [this] {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return open_; });
    };
  }
  void set_open(bool open) {
    {
      std::lock_guard lock(mu_);
      open_ = open;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
};

// CONFIG SET max-key-size and max-object-size, as the server applies them.
inline void set_object_limits(Store& store, int64_t max_key_size, int64_t max_object_size) {
  Config c;
  c.max_key_size = max_key_size;
  c.max_object_size = max_object_size;
  (void)store.apply_config(ConfigApply::kObjectLimits, c);
}

// CONFIG SET dirty-max-fraction.
inline void set_dirty_fraction(Store& store, double fraction) {
  Config c;
  c.dirty_max_fraction = fraction;
  (void)store.apply_config(ConfigApply::kDirtyFraction, c);
}

}  // namespace tierkv::testing
