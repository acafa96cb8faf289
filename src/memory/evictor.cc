#include "memory/evictor.h"

#include <fmt/format.h>

#include <chrono>

#include "core/clock.h"
#include "memory/memory_tier.h"
#include "memory/memory_tier_internal.h"

namespace tierkv::memory {
namespace {

thread_local bool tls_no_wait = false;
thread_local bool tls_clean_only = false;
// Reservations for the use-once lane: room comes only from use-once objects.
thread_local bool tls_use_once_only = false;

}  // namespace

MemoryTier::NoWaitScope::NoWaitScope() : saved_(std::exchange(tls_no_wait, true)) {}
MemoryTier::NoWaitScope::~NoWaitScope() {
  tls_no_wait = saved_;
}

MemoryTier::CleanOnlyScope::CleanOnlyScope() : saved_(std::exchange(tls_clean_only, true)) {}
MemoryTier::CleanOnlyScope::~CleanOnlyScope() {
  tls_clean_only = saved_;
}

Evictor::Evictor(MemoryTier& tier, int64_t offload_wait_ms)
    : tier_(tier), offload_wait_ms_(offload_wait_ms) {}

// Usage may pass the budget only by what is being offloaded: those bytes
// are already on their way out, so evicting more for them would be waste.
Status Evictor::reserve(int64_t bytes, uint64_t home_hash) {
  MemoryTier& t = tier_;
  if (bytes > t.budget_.load(std::memory_order_relaxed))
    return Status::out_of_memory(
        fmt::format("object needs {} bytes, memory budget is {}", bytes, t.budget_.load()));
  size_t home = t.shard_bits_ == 0 ? 0 : home_hash >> (64 - t.shard_bits_);
  int64_t deadline = 0;
  bool busy = false;        // nothing more to start until something lands
  bool queue_full = false;  // the lower tier refused an offload
  for (;;) {
    int64_t cur = t.used_.load(std::memory_order_relaxed);
    int64_t budget = t.budget_.load(std::memory_order_relaxed);
    bool fits = cur + bytes <= budget;
    int64_t ahead = t.lower_ ? budget / 16 : 0;
    bool behind =
        cur - t.offloading_bytes_.load(std::memory_order_relaxed) + bytes > budget - ahead;
    // Clean-only reservations never run offloads ahead: they only drop.
    if (!fits || (t.lower_ && behind && !busy && !tls_clean_only && !tls_use_once_only)) {
      // Round-robin over shards spreads eviction pressure evenly; starting
      // from the writer's own shard would punish keys that share it.
      size_t start = t.shard_count_ == 1 ? home : cursor_.fetch_add(1) % t.shard_count_;
      EvictResult r = evict_one(start);
      if (r == EvictResult::kOffloadStarted) continue;
      if (r == EvictResult::kFreed && !fits) continue;
      busy = busy || r == EvictResult::kBusy || r == EvictResult::kNothing;
      queue_full = queue_full || r == EvictResult::kBusy;
    }
    if (fits) {
      if (t.used_.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed))
        return Status::ok();
      continue;
    }
    // With a lower tier, what blocks eviction (offloads in flight, pins of
    // replies being sent) clears by itself soon: wait for it. Memory alone
    // fails fast, as a plain cache does.
    if (tls_no_wait || (offloads_inflight_.load() == 0 && t.lower_ == nullptr)) break;
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

Status Evictor::reserve_from_use_once(int64_t bytes) {
  MemoryTier::NoWaitScope no_wait;
  const bool saved = std::exchange(tls_use_once_only, true);
  Status st = reserve(bytes, 0);
  tls_use_once_only = saved;
  return st;
}

bool Evictor::trim_to_budget() {
  MemoryTier& t = tier_;
  while (t.used_bytes() - t.offloading_bytes_.load() > t.budget_bytes()) {
    EvictResult r = evict_one(cursor_.fetch_add(1) % t.shard_count_);
    if (r == EvictResult::kNothing || r == EvictResult::kBusy) return false;
  }
  return true;
}

void Evictor::wait_for_offloads(int64_t deadline_ms) {
  // Short slices: a landing that races with this wait is seen next slice.
  int64_t slice = std::min<int64_t>(deadline_ms - unix_time_ms(), 20);
  MutexLock lock(landed_mu_);
  landed_cv_.wait_for(landed_mu_, std::chrono::milliseconds(std::max<int64_t>(slice, 1)));
}

void Evictor::copy_finished(bool offload) {
  if (offload) offloads_inflight_.fetch_sub(1);
  MutexLock lock(landed_mu_);
  landed_cv_.notify_all();
}

Chunk* Evictor::pick_victim_locked(MemoryShard& s, int64_t now_ms) {
  s.mu.assert_held();
  auto can_evict = [&](const PolicyHook* h) {
    Chunk* c = Chunk::from_hook(const_cast<PolicyHook*>(h));
    if (tls_clean_only && !tier_.clean_below(c->owner())) return false;
    return tier_.evictable(c, now_ms);
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

void Evictor::begin_offload_locked(MemoryShard& s, Object* obj, OffloadItem& item) {
  s.mu.assert_held();
  // Still indexed, so readers find it until it lands below.
  tier_.leave_when_copied_locked(s, obj);
  offloads_inflight_.fetch_add(1);
  item = tier_.make_item_locked(s, obj, true);
}

Evictor::EvictResult Evictor::evict_one(size_t first_shard) {
  MemoryTier& t = tier_;
  int64_t now = unix_time_ms();
  ChunkList to_release;
  OffloadItem item;
  bool offload = false;
  for (size_t i = 0; i < t.shard_count_; ++i) {
    MemoryShard& s = t.shards_[(first_shard + i) % t.shard_count_];
    MutexLock lock(s.mu);
    Chunk* victim = pick_victim_locked(s, now);
    if (!victim) continue;
    Object* obj = victim->owner();
    if (t.lower_ && obj->flash_state == FlashState::kClean &&
        !t.lower_->holds(obj->key(), obj->hash(), obj->version(), obj->chunk_count())) {
      // Its copy below was reclaimed. What memory holds of it is all there
      // is: a whole object is written down again; a partial one is lost with
      // its copy (as a flash-only object would be), so it goes now.
      if (obj->partial()) {
        evict_whole_locked(s, obj, to_release);
        break;
      }
      t.set_flash_state(obj, FlashState::kDirty);
    }
    if (t.lower_ && obj->flash_state == FlashState::kFlushing) {
      t.leave_when_copied_locked(s, obj);
      return EvictResult::kOffloadStarted;
    }
    if (t.lower_ && obj->flash_state == FlashState::kDirty) {
      begin_offload_locked(s, obj, item);
      offload = true;
    } else if (t.lower_ && MemoryTier::evicts_by_chunk(obj)) {
      // The next eviction starts here again: the object's other chunks are
      // likely the shard's coldest too, and round-robin over shards would
      // otherwise take one chunk of it per round, keeping a large cold
      // object many times longer than a small one as cold.
      if (obj->resident() > 1) cursor_.store((first_shard + i) % t.shard_count_);
      evict_chunk_locked(s, victim, to_release);
    } else {
      evict_whole_locked(s, obj, to_release);
    }
    break;
  }
  if (!offload) {
    bool freed = !to_release.empty();
    int64_t bytes = 0;
    for (const Chunk* c : to_release) bytes += c->charge();
    t.release_all(to_release);
    t.note_freed(bytes);
    return freed ? EvictResult::kFreed : EvictResult::kNothing;
  }
  OffloadAnswer answer = t.lower_->offload(item);
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

void Evictor::evict_whole_locked(MemoryShard& s, Object* obj, ChunkList& to_release) {
  s.mu.assert_held();
  count_evicted(1, obj->resident());
  tier_.detach_locked(s, obj, to_release);
}

// The policy (or the use-once lane) has already let go of c's hook.
void Evictor::evict_chunk_locked(MemoryShard& s, Chunk* c, ChunkList& to_release) {
  s.mu.assert_held();
  Object* obj = c->owner();
  if (obj->resident() == 1) return evict_whole_locked(s, obj, to_release);
  if (c->flags() & Chunk::kLeased) tier_.end_lease_locked(c, false);
  obj->set_chunk(c->index(), nullptr);
  obj->set_resident(obj->resident() - 1);
  --s.chunks;
  c->detach();
  to_release.push_back(c);
  count_evicted(0, 1);
}

void Evictor::abort_offload(const OffloadItem& item, OffloadAnswer answer) {
  MemoryShard& s = tier_.shard_for(item.hash);
  ChunkList to_release;
  {
    MutexLock lock(s.mu);
    auto it = s.index.find(KeyRef{item.key, item.hash});
    if (it != s.index.end() && (*it)->version() == item.version &&
        (*it)->flash_state == FlashState::kOffloading) {
      Object* obj = *it;
      if (answer == OffloadAnswer::kBusy) {
        tier_.set_flash_state(obj, FlashState::kDirty);
        tier_.relink_victim_locked(s, obj, MemoryTier::Relink::kColdest);
      } else {
        count_offload_dropped();
        count_evicted(1, obj->chunk_count());
        tier_.detach_locked(s, obj, to_release);
      }
    }
  }
  tier_.release_all(to_release);
}

void Evictor::add_stats(MemoryTierStats& out) const {
  out.evicted_objects = evicted_objects_.load();
  out.evicted_chunks = evicted_chunks_.load();
  out.offloads_inflight = offloads_inflight_.load();
  out.offloads = offloads_.load();
  out.offload_busy = offload_busy_.load();
  out.offload_dropped = offload_dropped_.load();
  out.offload_waits = offload_waits_.load();
}

}  // namespace tierkv::memory
