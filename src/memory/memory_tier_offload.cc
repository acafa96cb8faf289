// MemoryTier: making room (reserve, eviction) and the hand-off of evicted
// dirty objects to the lower tier.
#include <fmt/format.h>

#include <chrono>

#include "core/clock.h"
#include "core/hash.h"
#include "memory/memory_tier.h"
#include "memory/memory_tier_internal.h"

namespace tierkv::memory {
namespace {

thread_local bool tls_no_wait = false;
thread_local bool tls_clean_only = false;
// Reservations for the use-once lane: room comes only from use-once objects.
thread_local bool tls_use_once_only = false;

}  // namespace

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

MemoryTier::NoWaitScope::NoWaitScope() : saved_(std::exchange(tls_no_wait, true)) {}
MemoryTier::NoWaitScope::~NoWaitScope() {
  tls_no_wait = saved_;
}

MemoryTier::CleanOnlyScope::CleanOnlyScope() : saved_(std::exchange(tls_clean_only, true)) {}
MemoryTier::CleanOnlyScope::~CleanOnlyScope() {
  tls_clean_only = saved_;
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
  for (const Chunk* c : obj->chunks)
    if (c) n += c->charge;
  return n;
}

// Usage may pass the budget only by what is being offloaded: those bytes
// are already on their way out, so evicting more for them would be waste.
// With a lower tier, offloads run ahead: once usage (not counting what is
// already on its way out) passes budget - budget/16, every reservation
// starts one more, so writers and promotions usually find room freed by
// earlier landings instead of waiting for their own (like a dirty-page
// writeback threshold). Memory alone evicts only when it must.
Status MemoryTier::reserve(int64_t bytes, uint64_t home_hash) {
  if (bytes > budget_.load(std::memory_order_relaxed))
    return Status::out_of_memory(
        fmt::format("object needs {} bytes, memory budget is {}", bytes, budget_.load()));
  size_t home = shard_bits_ == 0 ? 0 : home_hash >> (64 - shard_bits_);
  int64_t deadline = 0;
  bool busy = false;        // nothing more to start until something lands
  bool queue_full = false;  // the lower tier refused an offload
  for (;;) {
    int64_t cur = used_.load(std::memory_order_relaxed);
    int64_t budget = budget_.load(std::memory_order_relaxed);
    bool fits = cur + bytes <= budget;
    int64_t ahead = lower_ ? budget / 16 : 0;
    bool behind = cur - offloading_bytes_.load(std::memory_order_relaxed) + bytes > budget - ahead;
    // Clean-only reservations never run offloads ahead: they only drop.
    if (!fits || (lower_ && behind && !busy && !tls_clean_only && !tls_use_once_only)) {
      // Round-robin over shards spreads eviction pressure evenly; starting
      // from the writer's own shard would punish keys that share it.
      size_t start = shard_count_ == 1 ? home : evict_cursor_.fetch_add(1) % shard_count_;
      EvictResult r = evict_one(start);
      if (r == EvictResult::kOffloadStarted) continue;
      if (r == EvictResult::kFreed && !fits) continue;
      busy = busy || r == EvictResult::kBusy || r == EvictResult::kNothing;
      queue_full = queue_full || r == EvictResult::kBusy;
    }
    if (fits) {
      if (used_.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed))
        return Status::ok();
      continue;
    }
    // With a lower tier, what blocks eviction (offloads in flight, pins of
    // replies being sent) clears by itself soon: wait for it. Memory alone
    // fails fast, as a plain cache does.
    if (tls_no_wait || (offloads_inflight_.load() == 0 && lower_ == nullptr)) break;
    int64_t now = unix_time_ms();
    if (deadline == 0) {
      deadline = now + offload_wait_ms_.load(std::memory_order_relaxed);
      offload_waits_.fetch_add(1, std::memory_order_relaxed);
    }
    if (now >= deadline) break;
    wait_for_offloads(deadline);
    busy = false;
  }
  if (tls_use_once_only) return Status::out_of_memory("no free or use-once memory to make room");
  if (tls_clean_only)
    return Status::out_of_memory("no free or clean, unleased memory to make room");
  if (offloads_inflight_.load() > 0 || queue_full)
    return Status::out_of_memory("flash cannot keep up with writes: memory full of unwritten data");
  return Status::out_of_memory("memory budget full of pinned or leased data");
}

void MemoryTier::note_freed(int64_t bytes) {
  int64_t total = freed_since_trim_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (total < budget_bytes() / 4) return;
  freed_since_trim_.store(0, std::memory_order_relaxed);
  expiry_.request_trim();
}

void MemoryTier::wait_for_offloads(int64_t deadline_ms) {
  // Short slices: a landing that races with this wait is seen next slice.
  int64_t slice = std::min<int64_t>(deadline_ms - unix_time_ms(), 20);
  std::unique_lock lock(offload_mu_);
  offload_cv_.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(slice, 1)));
}

bool MemoryTier::clean_below(const Object* obj) const {
  return lower_ && obj->flash_state == FlashState::kClean &&
         lower_->holds(obj->key, obj->hash, obj->version,
                       static_cast<uint32_t>(obj->chunks.size()));
}

Chunk* MemoryTier::pick_victim_locked(Shard& s, int64_t now_ms) {
  auto can_evict = [&](const PolicyHook* h) {
    Chunk* c = Chunk::from_hook(const_cast<PolicyHook*>(h));
    if (tls_clean_only && !clean_below(c->owner)) return false;
    return evictable(c, now_ms);
  };
  PolicyHook* victim = nullptr;
  for (PolicyHook* h = s.use_once.back(); h && !victim; h = s.use_once.newer(h)) {
    if (can_evict(h)) victim = h;
  }
  if (victim)
    s.use_once.unlink(victim);
  else if (!tls_use_once_only)
    victim = s.policy->evict(can_evict);
  return victim ? Chunk::from_hook(victim) : nullptr;
}

OffloadItem MemoryTier::make_item_locked(Object* obj, bool evicted) {
  OffloadItem item;
  item.key = obj->key;
  item.hash = obj->hash;
  item.version = obj->version;
  item.size = obj->size;
  item.expire_at_ms = obj->expire_at_ms;
  item.evicted = evicted;
  item.chunks.reserve(obj->chunks.size());
  for (Chunk* c : obj->chunks) item.chunks.emplace_back(c);
  return item;
}

void MemoryTier::begin_offload_locked(Shard& s, Object* obj, OffloadItem& item) {
  // Out of every policy list, so no one picks it again; still indexed, so
  // readers find it until it lands below.
  for (Chunk* c : obj->chunks) {
    if (!c || !c->hook.linked) continue;
    if (c->flags & Chunk::kUseOnce)
      s.use_once.unlink(&c->hook);
    else
      s.policy->remove(&c->hook);
  }
  set_flash_state(obj, FlashState::kOffloading);
  offloads_inflight_.fetch_add(1);
  item = make_item_locked(obj, true);
}

MemoryTier::EvictResult MemoryTier::evict_one(size_t first_shard) {
  int64_t now = unix_time_ms();
  ChunkList to_release;
  OffloadItem item;
  bool offload = false;
  for (size_t i = 0; i < shard_count_; ++i) {
    Shard& s = shards_[(first_shard + i) % shard_count_];
    std::lock_guard lock(s.mu);
    Chunk* victim = pick_victim_locked(s, now);
    if (!victim) continue;
    Object* obj = victim->owner;
    if (lower_ && obj->flash_state == FlashState::kClean &&
        !lower_->holds(obj->key, obj->hash, obj->version,
                       static_cast<uint32_t>(obj->chunks.size()))) {
      // Its copy below was reclaimed. What memory holds of it is all there
      // is: a whole object is written down again; a partial one is lost with
      // its copy (as a flash-only object would be), so it goes now.
      if (obj->partial()) {
        evict_whole_locked(s, obj, to_release);
        break;
      }
      set_flash_state(obj, FlashState::kDirty);
    }
    if (lower_ && obj->flash_state == FlashState::kFlushing) {
      leave_when_copied_locked(s, obj);
      return EvictResult::kOffloadStarted;
    }
    if (lower_ && obj->flash_state == FlashState::kDirty) {
      begin_offload_locked(s, obj, item);
      offload = true;
    } else if (lower_ && evicts_by_chunk(obj)) {
      // The next eviction starts here again: the object's other chunks are
      // likely the shard's coldest too, and round-robin over shards would
      // otherwise take one chunk of it per round, keeping a large cold
      // object many times longer than a small one as cold.
      if (obj->resident > 1) evict_cursor_.store((first_shard + i) % shard_count_);
      evict_chunk_locked(s, victim, to_release);
    } else {
      evict_whole_locked(s, obj, to_release);
    }
    break;
  }
  if (!offload) {
    bool freed = !to_release.empty();
    int64_t bytes = 0;
    for (const Chunk* c : to_release) bytes += c->charge;
    release_all(to_release);
    note_freed(bytes);
    return freed ? EvictResult::kFreed : EvictResult::kNothing;
  }
  OffloadAnswer answer = lower_->offload(item);
  if (answer == OffloadAnswer::kQueued) {
    offloads_.fetch_add(1, std::memory_order_relaxed);
    return EvictResult::kOffloadStarted;
  }
  offloads_inflight_.fetch_sub(1);
  abort_offload(item, answer);
  if (answer == OffloadAnswer::kBusy) {
    offload_busy_.fetch_add(1, std::memory_order_relaxed);
    return EvictResult::kBusy;
  }
  return EvictResult::kFreed;
}

bool MemoryTier::evicts_by_chunk(const Object* obj) {
  return obj->flash_state == FlashState::kClean && obj->chunks.size() > 1;
}

void MemoryTier::evict_whole_locked(Shard& s, Object* obj, ChunkList& to_release) {
  evicted_objects_.fetch_add(1, std::memory_order_relaxed);
  evicted_chunks_.fetch_add(obj->resident, std::memory_order_relaxed);
  detach_locked(s, obj, to_release);
}

// The policy (or the use-once lane) has already let go of c's hook.
void MemoryTier::evict_chunk_locked(Shard& s, Chunk* c, ChunkList& to_release) {
  Object* obj = c->owner;
  if (obj->resident == 1) return evict_whole_locked(s, obj, to_release);
  if (c->flags & Chunk::kLeased) end_lease_locked(c, false);
  obj->chunks[c->index] = nullptr;
  --obj->resident;
  --s.chunks;
  c->owner = nullptr;
  to_release.push_back(c);
  evicted_chunks_.fetch_add(1, std::memory_order_relaxed);
}

void MemoryTier::abort_offload(const OffloadItem& item, OffloadAnswer answer) {
  Shard& s = shard_for(item.hash);
  ChunkList to_release;
  {
    std::lock_guard lock(s.mu);
    auto it = s.index.find(KeyRef{item.key, item.hash});
    if (it != s.index.end() && (*it)->version == item.version &&
        (*it)->flash_state == FlashState::kOffloading) {
      Object* obj = *it;
      if (answer == OffloadAnswer::kBusy) {
        set_flash_state(obj, FlashState::kDirty);
        relink_victim_locked(s, obj, Relink::kColdest);
      } else {
        offload_dropped_.fetch_add(1, std::memory_order_relaxed);
        evicted_objects_.fetch_add(1, std::memory_order_relaxed);
        evicted_chunks_.fetch_add(obj->chunks.size(), std::memory_order_relaxed);
        detach_locked(s, obj, to_release);
      }
    }
  }
  release_all(to_release);
}

void MemoryTier::relink_victim_locked(Shard& s, Object* obj, Relink where) {
  bool coldest = where == Relink::kColdest;
  for (Chunk* c : obj->chunks) {
    if (!c || c->hook.linked) continue;
    if (c->flags & Chunk::kUseOnce)
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
    std::lock_guard lock(s.mu);
    auto it = s.index.find(KeyRef{key, hash});
    Object* obj = it != s.index.end() && (*it)->version == version ? *it : nullptr;
    // An EXPIRE/PERSIST while the copy was being written: the copy has the
    // old expiry. Told under this lock, so a later set_expiry comes after.
    if (obj && ok && lower_ && obj->expire_at_ms != written_expire_at_ms)
      lower_->reconcile_expiry(obj->key, version, obj->expire_at_ms);
    if (obj && obj->flash_state == FlashState::kOffloading && !ok && !offload) {
      keep_after_failed_copy_locked(s, obj);
    } else if (obj && obj->flash_state == FlashState::kOffloading) {
      if (!ok) offload_dropped_.fetch_add(1, std::memory_order_relaxed);
      evicted_objects_.fetch_add(1, std::memory_order_relaxed);
      evicted_chunks_.fetch_add(obj->chunks.size(), std::memory_order_relaxed);
      detach_locked(s, obj, to_release);
    } else if (obj && obj->flash_state == FlashState::kFlushing) {
      set_flash_state(obj, ok ? FlashState::kClean : FlashState::kDirty);
    }
  }
  release_all(to_release);
  if (offload) offloads_inflight_.fetch_sub(1);
  std::lock_guard lock(offload_mu_);
  offload_cv_.notify_all();
}

std::optional<OffloadItem> MemoryTier::begin_flush(std::string_view key, uint64_t version,
                                                   bool in_flight_too) {
  uint64_t hash = hash64(key);
  Shard& s = shard_for(hash);
  std::lock_guard lock(s.mu);
  auto it = s.index.find(KeyRef{key, hash});
  if (it == s.index.end() || (*it)->version != version) return std::nullopt;
  Object* obj = *it;
  if (obj->flash_state == FlashState::kDirty) {
    set_flash_state(obj, FlashState::kFlushing);
  } else if (obj->flash_state == FlashState::kClean || !in_flight_too) {
    return std::nullopt;
  }
  return make_item_locked(obj, false);
}

void MemoryTier::flush_all_dirty(const std::function<void(OffloadItem&&)>& fn) {
  std::vector<OffloadItem> items;
  for (size_t i = 0; i < shard_count_; ++i) {
    Shard& s = shards_[i];
    {
      std::lock_guard lock(s.mu);
      for (Object* obj : s.index) {
        if (obj->flash_state != FlashState::kDirty) continue;
        set_flash_state(obj, FlashState::kFlushing);
        items.push_back(make_item_locked(obj, false));
      }
    }
    for (OffloadItem& item : items) fn(std::move(item));
    items.clear();
  }
}

bool MemoryTier::trim_to_budget() {
  while (used_bytes() - offloading_bytes_.load() > budget_bytes()) {
    EvictResult r = evict_one(evict_cursor_.fetch_add(1) % shard_count_);
    if (r == EvictResult::kNothing || r == EvictResult::kBusy) return false;
  }
  return true;
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
  Status st;
  {
    NoWaitScope no_wait;
    const bool saved = std::exchange(tls_use_once_only, true);
    st = reserve(bytes, 0);
    tls_use_once_only = saved;
  }
  if (!st.is_ok()) use_once_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  return st;
}

void MemoryTier::uncharge_use_once(int64_t bytes) {
  use_once_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  unreserve(bytes);
}

void MemoryTier::drop_use_once_locked(Shard& s, Object* obj, ChunkList& to_release) {
  if (obj->partial()) return;
  for (const Chunk* c : obj->chunks) {
    if (!(c->flags & Chunk::kUseOnce) || !c->hook.linked) return;
    // The index's reference and the reader's pin: anyone else keeps it.
    if (c->refs.load(std::memory_order_acquire) > 2 || (c->flags & Chunk::kLeased)) return;
  }
  if (!clean_below(obj)) return;  // dropping it would lose the only copy
  use_once_dropped_.fetch_add(obj->chunks.size(), std::memory_order_relaxed);
  detach_locked(s, obj, to_release);
}

}  // namespace tierkv::memory
