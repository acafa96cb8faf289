// ReadAccounting: what the Store's counted requests tell the keyspace
// counters (hits, misses, reads answered from flash) and the miss-ratio
// curves (store/sizing). Every counted read is a hit or a miss of both; a
// write of a new version and a removal reach the curves too. A use-once
// stream tile counts as a hit from flash but is not what the curves size.
//
// The curves size objects by what they cost the memory tier: `charge` says
// it, and is asked only for a key some model samples (most keys are in no
// sample and cost a hash and a compare).
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "core/metrics.h"
#include "store/sizing/miss_ratio_curves.h"

namespace tierkv {

class ReadAccounting {
 public:
  // The memory tier's charge for an object of `object_size` under a key of
  // `key_bytes`.
  using Charge = std::function<uint64_t(size_t key_bytes, uint64_t object_size)>;

  ReadAccounting(MetricsRegistry& metrics, const SizingOptions& sizing, Charge charge);

  void hit(std::string_view key, uint64_t object_size);
  void miss(std::string_view key);
  // A counted hit that flash answered (after hit()).
  void from_flash() { flash_hits_.add(); }
  void stream_tile() {
    hits_.add();
    flash_hits_.add();
  }
  void write(std::string_view key, uint64_t object_size);
  void remove(std::string_view key);

  uint64_t hits() const { return hits_.value(); }
  uint64_t misses() const { return misses_.value(); }
  uint64_t flash_hits() const { return flash_hits_.value(); }
  MissRatioCurves::Curves curves() const { return curves_.curves(); }

 private:
  Counter& hits_;
  Counter& misses_;
  Counter& flash_hits_;
  MissRatioCurves curves_;
  const Charge charge_;
};

}  // namespace tierkv
