// KeyLocks: a fixed array of mutexes striped by key hash, for the rare
// operations that must be atomic across both tiers (removal against
// promotion). The read and write hot paths never take them.
#pragma once

#include <array>
#include <cstdint>

#include "core/mutex.h"

namespace tierkv {

class KeyLocks {
 public:
  Mutex& for_hash(uint64_t hash) { return stripes_[hash % stripes_.size()].mu; }

 private:
  struct alignas(64) Stripe {
    Mutex mu;  // guards no field: it serializes work on its keys
  };
  std::array<Stripe, 256> stripes_;
};

}  // namespace tierkv
