// Helpers shared by the memory tier tests.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/hash.h"

namespace tierkv::memory::testing {

// Bytes determined by (key, seed, position): a value read back can be checked
// against its key and seed, so a torn or mixed read is detected.
inline std::string make_value(std::string_view key, uint64_t seed, size_t size) {
  std::string v(size, '\0');
  uint64_t x = hash64(key, seed) | 1;
  for (size_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<char>(x);
  }
  return v;
}

inline std::string key_of(int i) {
  std::string k = "key:";
  k += std::to_string(i);
  return k;
}

}  // namespace tierkv::memory::testing
