// One hash function for the whole engine: xxh3 (64-bit). Shard choice, the
// index, ghost queues and checksums all use it, so a key is hashed once.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <string_view>

namespace tierkv {

inline uint64_t hash64(std::string_view bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

inline uint64_t hash64(std::string_view bytes, uint64_t seed) {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed);
}

// Mixes a key hash with a chunk index: the identity of one chunk.
inline uint64_t chunk_hash(uint64_t key_hash, uint32_t chunk_index) {
  uint64_t x = key_hash ^ (uint64_t{chunk_index} * 0x9E3779B97F4A7C15ULL);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

}  // namespace tierkv
