// The load generator's workload: which key an operation touches (zipfian),
// how large each key's value is, and what bytes a value of a given version
// holds, so that every GET can be checked byte for byte.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "cache_client.h"

namespace tierkv::bench {

// Key ids drawn with P(rank r) proportional to 1 / (r + 1)^theta. The rank is
// mapped to a key id through a seeded shuffle, so the hot keys are spread over
// the id space (and over the order in which the load phase writes them).
class ZipfianChooser {
 public:
  ZipfianChooser(size_t keys, double theta, uint64_t seed);
  size_t next(std::mt19937_64& rng) const;

 private:
  std::vector<double> cdf_;           // cdf_[r] = P(rank <= r)
  std::vector<uint32_t> id_of_rank_;  // the shuffle
};

// A value is a 16-byte head (key id, version; little-endian) and a body cut
// from a shared random pool at an offset derived from (id, version). Sizes
// are fixed per key, so a value of the wrong length is an error too.
class KeySpace {
 public:
  static constexpr size_t kHeadSize = 16;

  KeySpace(size_t keys, size_t min_value, size_t max_value, uint64_t seed);

  size_t size() const { return names_.size(); }
  const std::string& key(size_t id) const { return names_[id]; }
  size_t value_size(size_t id) const { return sizes_[id]; }
  uint64_t mean_value_size() const;

  uint64_t current_version(size_t id) const {
    return versions_[id].load(std::memory_order_acquire);
  }
  // The version an explicit SET writes: one past any issued before.
  uint64_t next_version(size_t id) {
    return versions_[id].fetch_add(1, std::memory_order_acq_rel) + 1;
  }

  // The bytes of (id, version); `head` receives the 16 header bytes and must
  // outlive the returned parts.
  ValueParts value(size_t id, uint64_t version, char (&head)[kHeadSize]) const;
  // True when `bytes` is exactly the value of key `id` at a version that has
  // been issued (a reader may see an older version than the newest).
  bool verify(size_t id, std::string_view bytes) const;

 private:
  std::string_view body(size_t id, uint64_t version) const;

  std::vector<std::string> names_;
  std::vector<uint32_t> sizes_;
  std::unique_ptr<std::atomic<uint64_t>[]> versions_;
  std::string pool_;
  size_t pool_offsets_;  // how many start offsets a body may have
};

}  // namespace tierkv::bench
