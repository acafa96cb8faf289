#include "cluster/handoffs.h"

#include <absl/container/flat_hash_map.h>

namespace tierkv::cluster {

void Handoffs::note(const SlotMap* old, const SlotMap& next, std::string_view self_id,
                    int64_t now_ms) {
  MutexLock lock(mu_);
  absl::erase_if(by_slot_, [now_ms](const auto& e) { return e.second.until_ms <= now_ms; });
  const std::optional<size_t> self = old ? old->index_of(self_id) : std::nullopt;
  if (!self) return;
  const int64_t until = now_ms + window_ms_;
  bool added = false;
  for (uint32_t s = 0; s < kSlotCount; ++s) {
    const auto slot = static_cast<uint16_t>(s);
    const size_t target = old->moving_to(slot);
    if (old->owner(slot) != *self || target == SlotMap::kNoNode) continue;
    const std::string& target_id = old->nodes()[target].id;
    const size_t now_owner = next.owner(slot);
    if (now_owner == SlotMap::kNoNode || next.nodes()[now_owner].id != target_id) continue;
    by_slot_[slot] = Entry{target_id, until};
    added = true;
  }
  if (added) latest_until_ms_.store(until, std::memory_order_release);
}

bool Handoffs::handed_to(uint16_t slot, std::string_view owner_id, int64_t now_ms) const {
  if (!any(now_ms)) return false;
  MutexLock lock(mu_);
  const auto it = by_slot_.find(slot);
  return it != by_slot_.end() && it->second.until_ms > now_ms && it->second.target_id == owner_id;
}

}  // namespace tierkv::cluster
