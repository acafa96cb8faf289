// Factories of the individual policies; make_policy() picks among them.
#pragma once

#include <memory>

#include "memory/policy/eviction_policy.h"

namespace tierkv::memory {

std::unique_ptr<EvictionPolicy> make_s3fifo_policy();
std::unique_ptr<EvictionPolicy> make_lru_policy();
std::unique_ptr<EvictionPolicy> make_clock_policy();
std::unique_ptr<EvictionPolicy> make_sieve_policy();

}  // namespace tierkv::memory
