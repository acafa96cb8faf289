// MemoryTier: the flash states of objects, the hand-off of copies to the
// lower tier and their landing, and the use-once lane. Making room is the
// Evictor's.
#include <fmt/format.h>

#include <chrono>

#include "core/clock.h"
#include "core/hash.h"
#include "memory/memory_tier.h"
#include "memory/memory_tier_internal.h"

namespace tierkv::memory {
std::string_view flash_state_name(FlashState state) {
  switch (state) {
    case FlashState::kDirty:
      return "dirty";
    case FlashState::kFlushing:
      return "flushing";
    case FlashState::kClean:
      return "clean";
    case FlashState::kOffloading:
      return "offloading";
  }
  return "?";
}

void MemoryTier::count_flash_state(const Object* obj, FlashState state, int sign) {
  switch (state) {
    case FlashState::kDirty:
      dirty_bytes_.fetch_add(sign * chunk_charge(obj), std::memory_order_relaxed);
      return;
    case FlashState::kClean:
      clean_objects_.fetch_add(sign, std::memory_order_relaxed);
      return;
    case FlashState::kOffloading:
      offloading_bytes_.fetch_add(sign * chunk_charge(obj), std::memory_order_relaxed);
      return;
    case FlashState::kFlushing:
      return;
  }
}

void MemoryTier::set_flash_state(Object* obj, FlashState state) {
  count_flash_state(obj, obj->flash_state, -1);
  obj->flash_state = state;
  count_flash_state(obj, state, +1);
}

int64_t MemoryTier::chunk_charge(const Object* obj) {
  int64_t n = 0;
  for (const Chunk* c : obj->chunks())
    if (c) n += c->charge();
  return n;
}

void MemoryTier::note_freed(int64_t bytes) {
  int64_t total = freed_since_trim_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (total < budget_bytes() / 4) return;
  freed_since_trim_.store(0, std::memory_order_relaxed);
  expiry_.request_trim();
}

bool MemoryTier::clean_below(const Object* obj) const {
  return lower_ && obj->flash_state == FlashState::kClean &&
         lower_->holds(obj->key(), obj->hash(), obj->version(), obj->chunk_count());
}

OffloadItem MemoryTier::make_item_locked(const Shard& s, Object* obj, bool evicted) {
  OffloadItem item;
  item.key = std::string(obj->key());
  item.hash = obj->hash();
  item.version = obj->version();
  item.size = obj->size();
  item.expire_at_ms = expire_at_locked(s, obj);
  item.evicted = evicted;
  item.chunks.reserve(obj->chunk_count());
  for (Chunk* c : obj->chunks()) item.chunks.emplace_back(c);
  return item;
}

bool MemoryTier::evicts_by_chunk(const Object* obj) {
  return obj->flash_state == FlashState::kClean && obj->chunk_count() > 1;
}

void MemoryTier::relink_victim_locked(Shard& s, Object* obj, Relink where) {
  s.mu.assert_held();
  bool coldest = where == Relink::kColdest;
  for (Chunk* c : obj->chunks()) {
    if (!c || c->hook.linked) continue;
    if (c->flags() & Chunk::kUseOnce)
      coldest ? s.use_once.push_back(&c->hook) : s.use_once.push_front(&c->hook);
    else
      coldest ? s.policy->reinstate(&c->hook) : s.policy->insert(&c->hook);
  }
}

void MemoryTier::finish_flash_write(std::string_view key, uint64_t version, bool offload, bool ok,
                                    int64_t written_expire_at_ms) {
  uint64_t hash = hash64(key);
  Shard& s = shard_for(hash);
  ChunkList to_release;
  {
    MutexLock lock(s.mu);
    auto it = s.index.find(KeyRef{key, hash});
    Object* obj = it != s.index.end() && (*it)->version() == version ? *it : nullptr;
    // An EXPIRE/PERSIST while the copy was being written: the copy has the
    // old expiry. Told under this lock, so a later set_expiry comes after.
    const int64_t expire_at = obj ? expire_at_locked(s, obj) : 0;
    if (obj && ok && lower_ && expire_at != written_expire_at_ms)
      lower_->reconcile_expiry(obj->key(), version, expire_at);
    if (obj && obj->flash_state == FlashState::kOffloading && !ok && !offload) {
      keep_after_failed_copy_locked(s, obj);
    } else if (obj && obj->flash_state == FlashState::kOffloading) {
      if (!ok) evictor_.count_offload_dropped();
      evictor_.count_evicted(1, obj->chunk_count());
      detach_locked(s, obj, to_release);
    } else if (obj && obj->flash_state == FlashState::kFlushing) {
      set_flash_state(obj, ok ? FlashState::kClean : FlashState::kDirty);
    }
  }
  release_all(to_release);
  evictor_.copy_finished(offload);
}

std::optional<OffloadItem> MemoryTier::begin_flush(std::string_view key, uint64_t version,
                                                   bool in_flight_too) {
  uint64_t hash = hash64(key);
  Shard& s = shard_for(hash);
  MutexLock lock(s.mu);
  auto it = s.index.find(KeyRef{key, hash});
  if (it == s.index.end() || (*it)->version() != version) return std::nullopt;
  Object* obj = *it;
  if (obj->flash_state == FlashState::kDirty) {
    set_flash_state(obj, FlashState::kFlushing);
  } else if (obj->flash_state == FlashState::kClean || !in_flight_too) {
    return std::nullopt;
  }
  return make_item_locked(s, obj, false);
}

void MemoryTier::flush_all_dirty(const std::function<void(OffloadItem&&)>& fn) {
  std::vector<OffloadItem> items;
  for (size_t i = 0; i < shard_count_; ++i) {
    Shard& s = shards_[i];
    {
      MutexLock lock(s.mu);
      for (Object* obj : s.index) {
        if (obj->flash_state != FlashState::kDirty) continue;
        set_flash_state(obj, FlashState::kFlushing);
        items.push_back(make_item_locked(s, obj, false));
      }
    }
    for (OffloadItem& item : items) fn(std::move(item));
    items.clear();
  }
}

// --- the use-once lane ---

Status MemoryTier::charge_use_once(int64_t bytes) {
  const int64_t cap = static_cast<int64_t>(static_cast<double>(budget_bytes()) *
                                           use_once_max_fraction_.load(std::memory_order_relaxed));
  // Taken first, so that racing charges cannot pass the cap together.
  int64_t cur = use_once_bytes_.load(std::memory_order_relaxed);
  do {
    if (cur + bytes > cap) return Status::busy("use-once lane full");
  } while (!use_once_bytes_.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed));
  Status st = evictor_.reserve_from_use_once(bytes);
  if (!st.is_ok()) use_once_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  return st;
}

void MemoryTier::uncharge_use_once(int64_t bytes) {
  use_once_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  unreserve(bytes);
}

void MemoryTier::drop_use_once_locked(Shard& s, Object* obj, ChunkList& to_release) {
  s.mu.assert_held();
  if (obj->partial()) return;
  for (const Chunk* c : obj->chunks()) {
    if (!(c->flags() & Chunk::kUseOnce) || !c->hook.linked) return;
    // The index's reference and the reader's pin: anyone else keeps it.
    if (c->refs() > 2 || (c->flags() & Chunk::kLeased)) return;
  }
  if (!clean_below(obj)) return;  // dropping it would lose the only copy
  use_once_dropped_.fetch_add(obj->chunk_count(), std::memory_order_relaxed);
  detach_locked(s, obj, to_release);
}

}  // namespace tierkv::memory
