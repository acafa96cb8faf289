// LogThrottle: lets one log line through per interval and counts the lines
// it held back, so a failing device (every write fails) logs once a second
// saying how many failures went unlogged, instead of flooding the log.
// Thread-safe.
#pragma once

#include <cstdint>
#include <optional>

#include "core/clock.h"
#include "core/mutex.h"

namespace tierkv {

class LogThrottle {
 public:
  explicit LogThrottle(uint64_t interval_ns = 1'000'000'000) : interval_ns_(interval_ns) {}

  // The number of lines held back since the last one let through, if this
  // line may be logged now; nothing (and it is counted) otherwise. `now` is
  // the monotonic clock (given by tests).
  std::optional<uint64_t> admit(uint64_t now = mono_ns()) {
    MutexLock lock(mu_);
    if (logged_once_ && now - last_ns_ < interval_ns_) {
      ++held_back_;
      return std::nullopt;
    }
    logged_once_ = true;
    last_ns_ = now;
    const uint64_t held = held_back_;
    held_back_ = 0;
    return held;
  }

 private:
  const uint64_t interval_ns_;
  Mutex mu_;
  bool logged_once_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t last_ns_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t held_back_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tierkv
