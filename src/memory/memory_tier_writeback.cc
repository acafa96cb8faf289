// MemoryTier: the memory side of background writeback. The store's
// Writeback decides when and how much; this picks which objects, coldest
// first, and hands them out as write-through copies.
#include "core/clock.h"
#include "memory/memory_tier.h"
#include "memory/memory_tier_internal.h"

namespace tierkv::memory {

std::vector<OffloadItem> MemoryTier::take_cold_dirty(int64_t max_bytes, size_t max_steps) {
  std::vector<OffloadItem> out;
  if (lower_ == nullptr || max_bytes <= 0) return out;
  // A share per shard, so every shard's coldest go first rather than one
  // shard's whole cold end: the policies order entries per shard only.
  const int64_t per_shard = std::max<int64_t>(max_bytes / static_cast<int64_t>(shard_count_), 1);
  const int64_t now = unix_time_ms();
  int64_t taken = 0;
  for (size_t i = 0; i < shard_count_ && taken < max_bytes; ++i) {
    Shard& s = shards_[writeback_cursor_.fetch_add(1, std::memory_order_relaxed) % shard_count_];
    MutexLock lock(s.mu);
    take_cold_dirty_locked(s, std::min(per_shard, max_bytes - taken), max_steps, now, out, taken);
  }
  return out;
}

void MemoryTier::take_cold_dirty_locked(Shard& s, int64_t max_bytes, size_t max_steps,
                                        int64_t now_ms, std::vector<OffloadItem>& out,
                                        int64_t& taken) {
  s.mu.assert_held();
  int64_t here = 0;
  // Bytes are checked before each step: the hand must not pass a dirty
  // object it would then leave behind until its next walk.
  for (size_t step = 0; step < max_steps && here < max_bytes; ++step) {
    PolicyHook* h = s.policy->next_cold();
    if (h == nullptr) break;  // walked the whole shard; the next walk restarts
    Object* obj = Chunk::from_hook(h)->owner();
    // One visit per object: its other chunks find it kFlushing. An expired
    // object is not worth a write.
    if (obj->flash_state != FlashState::kDirty || expired(s, obj, now_ms)) continue;
    here += chunk_charge(obj);
    set_flash_state(obj, FlashState::kFlushing);
    out.push_back(make_item_locked(s, obj, false));
  }
  taken += here;
}

void MemoryTier::leave_when_copied_locked(Shard& s, Object* obj) {
  s.mu.assert_held();
  // Out of every policy list, so no one picks it again; the copy's landing
  // (finish_flash_write) then drops it. Eviction of a copy under way needs
  // no new write; an offload (Evictor) starts one.
  for (Chunk* c : obj->chunks()) {
    if (!c || !c->hook.linked) continue;
    if (c->flags() & Chunk::kUseOnce)
      s.use_once.unlink(&c->hook);
    else
      s.policy->remove(&c->hook);
  }
  set_flash_state(obj, FlashState::kOffloading);
}

void MemoryTier::keep_after_failed_copy_locked(Shard& s, Object* obj) {
  s.mu.assert_held();
  set_flash_state(obj, FlashState::kDirty);
  relink_victim_locked(s, obj, Relink::kNewest);
}

}  // namespace tierkv::memory
