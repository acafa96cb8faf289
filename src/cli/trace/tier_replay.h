// Replays a trace through the real MemoryTier with a capacity in objects.
//
// Every request is one object with an 8-byte key (the trace id) and a small
// fixed-size value, so every object costs the budget the same. The tier gets
// one shard, an index pre-sized for every unique id (its charge is fixed up
// front and never grows), and a budget of index + capacity objects plus less
// than one object of slack: exactly `capacity` objects fit. Per request:
// get(key), and on a miss put(key, value), as a look-aside cache does.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "cli/trace/dense_trace.h"
#include "core/status.h"
#include "memory/policy/eviction_policy.h"

namespace tierkv::trace {

inline constexpr uint32_t kReplayValueSize = 16;

struct ReplayResult {
  uint64_t requests = 0;
  uint64_t misses = 0;
  uint64_t max_resident = 0;  // most objects the tier held at once
  double miss_ratio() const { return requests ? static_cast<double>(misses) / requests : 0.0; }
};

// Fails (kInternal) if the tier ever holds more than `capacity` objects, or
// never fills to min(capacity, unique ids): then it is not the cache the
// miss ratio claims to describe.
// `observe`, if given, hears each request's key (the 8 bytes) and whether
// it hit, before the miss's put.
using ReplayObserver = std::function<void(std::string_view key, bool hit)>;
Result<ReplayResult> replay_through_tier(const DenseTrace& trace, memory::PolicyKind policy,
                                         size_t capacity, const ReplayObserver& observe = {});
// What one replayed object costs the tier's budget.
uint64_t replay_object_charge();

}  // namespace tierkv::trace
