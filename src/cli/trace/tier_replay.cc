#include "cli/trace/tier_replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "memory/memory_tier.h"

namespace tierkv::trace {

uint64_t replay_object_charge() {
  memory::MemoryTierOptions options;
  options.shards = 1;
  options.budget_bytes = 1 << 20;
  return memory::MemoryTier(options).charge_for_object(sizeof(uint64_t), kReplayValueSize);
}

Result<ReplayResult> replay_through_tier(const DenseTrace& trace, memory::PolicyKind policy,
                                         size_t capacity, const ReplayObserver& observe) {
  constexpr size_t kKeySize = sizeof(uint64_t);
  if (capacity == 0) return Status::invalid_argument("capacity must be at least one object");
  memory::MemoryTierOptions options;
  options.policy = policy;
  options.shards = 1;
  options.expected_objects = trace.unique();
  options.budget_bytes = INT64_MAX / 4;  // set exactly below, once the index charge is known
  memory::MemoryTier tier(options);
  const int64_t index_charge = tier.stats().index_bytes;
  const auto per_object = static_cast<int64_t>(tier.charge_for_object(kKeySize, kReplayValueSize));
  const int64_t budget =
      index_charge + static_cast<int64_t>(capacity) * per_object + per_object / 2;
  TIERKV_RETURN_IF_ERROR(tier.set_budget(budget));

  const std::string value(kReplayValueSize, 'v');
  ReplayResult r;
  r.requests = trace.requests();
  for (uint32_t id : trace.ids) {
    char key_bytes[kKeySize];
    std::memcpy(key_bytes, &trace.keys[id], kKeySize);
    std::string_view key(key_bytes, kKeySize);
    const bool hit = static_cast<bool>(tier.get(key));  // the view (and its pins) dies here
    if (observe) observe(key, hit);
    if (hit) continue;
    ++r.misses;
    Result<memory::WriteResult> put = tier.put(key, value);
    if (!put) return Status::internal(fmt::format("put failed: {}", put.status().to_string()));
    uint64_t resident = tier.object_count();
    r.max_resident = std::max(r.max_resident, resident);
    if (resident > capacity)
      return Status::internal(fmt::format("{}: tier holds {} objects, capacity is {}",
                                          memory::policy_name(policy), resident, capacity));
  }
  if (tier.stats().index_bytes != index_charge)
    return Status::internal("the tier's index grew during replay; its charge was not fixed");
  if (r.max_resident != std::min(capacity, trace.unique()))
    return Status::internal(fmt::format("{}: tier held at most {} objects, capacity is {}",
                                        memory::policy_name(policy), r.max_resident, capacity));
  return r;
}

}  // namespace tierkv::trace
