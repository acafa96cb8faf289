#include "memory/lease_table.h"

#include <cassert>

namespace tierkv::memory {

void LeaseTable::set(Chunk* c, int64_t until_ms) {
  auto [it, added] = slot_.try_emplace(c, static_cast<uint32_t>(leases_.size()));
  if (added) {
    leases_.push_back({c, until_ms});
  } else {
    leases_[it->second].until_ms = until_ms;
  }
}

int64_t LeaseTable::until(const Chunk* c) const {
  auto it = slot_.find(c);
  assert(it != slot_.end());
  return it == slot_.end() ? 0 : leases_[it->second].until_ms;
}

void LeaseTable::remove(const Chunk* c) {
  auto it = slot_.find(c);
  if (it == slot_.end()) return;
  const uint32_t slot = it->second;
  slot_.erase(it);
  if (slot + 1 != leases_.size()) {
    leases_[slot] = leases_.back();
    slot_[leases_[slot].chunk] = slot;
  }
  leases_.pop_back();
}

void LeaseTable::clear() {
  std::vector<Lease>().swap(leases_);
  absl::flat_hash_map<const Chunk*, uint32_t>().swap(slot_);
}

}  // namespace tierkv::memory
