// Time sources. Expiry uses wall-clock milliseconds (Redis semantics: EXPIREAT
// takes a unix time); latency uses the monotonic clock.
#pragma once

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

}  // namespace tierkv
