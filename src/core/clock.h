// Time sources. Expiry uses wall-clock milliseconds (Redis semantics: EXPIREAT
// takes a unix time); latency uses the monotonic clock.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>

namespace tierkv {

inline int64_t unix_time_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

inline int64_t unix_time_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

inline uint64_t mono_ns() {
  using namespace std::chrono;
  return duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
}

// The monotonic clock at the kernel's tick (a few ms), for a check run on
// every command that only needs to know whether seconds have passed: about
// a quarter of mono_ns()'s cost. Never ahead of mono_ns().
inline int64_t coarse_mono_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

}  // namespace tierkv
