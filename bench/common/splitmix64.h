// splitmix64: a cheap, well-mixed 64-bit hash of a counter, for picking the
// benchmark drivers' keys (the same sequence in every run and every arm).
#pragma once

#include <cstdint>

namespace tierkv::bench {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace tierkv::bench
