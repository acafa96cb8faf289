// MemoryTier: key-space operations (presence, removal, expiry, leases, scan)
// and the background expiry thread.
#include <fmt/format.h>
#include <malloc.h>

#include <algorithm>
#include <random>

#include "core/clock.h"
#include "core/hash.h"
#include "memory/memory_tier.h"
#include "memory/memory_tier_internal.h"

namespace tierkv::memory {

Object* MemoryTier::find_live_locked(Shard& s, std::string_view key, uint64_t hash, int64_t now,
                                     ChunkList& to_release) {
  s.mu.assert_held();
  auto it = s.index.find(KeyRef{key, hash});
  if (it == s.index.end()) return nullptr;
  Object* obj = *it;
  // A part without the rest (its copy below was reclaimed) is no object:
  // dropped on sight, as an expired one is.
  if (obj->partial() && !clean_below(obj)) {
    evictor_.evict_whole_locked(s, obj, to_release);
    return nullptr;
  }
  if (!obj->has_ttl) return obj;
  if (now == 0) now = unix_time_ms();  // read the clock only when it matters
  if (!expired(s, obj, now)) return obj;
  expired_objects_.fetch_add(1, std::memory_order_relaxed);
  expire_locked(s, obj, to_release);
  return nullptr;
}

void MemoryTier::expire_locked(Shard& s, Object* obj, ChunkList& to_release) {
  s.mu.assert_held();
  // A clean object's copy below may carry another expiry (or be landing
  // with one); dirty ones have no copy.
  if (lower_ && obj->flash_state != FlashState::kDirty)
    lower_->reconcile_expiry(obj->key(), obj->version(), expire_at_locked(s, obj));
  detach_locked(s, obj, to_release);
}

bool MemoryTier::contains(std::string_view key) {
  uint64_t hash = hash64(key);
  Shard& s = shard_for(hash);
  ChunkList to_release;
  bool found;
  {
    MutexLock lock(s.mu);
    Object* obj = find_live_locked(s, key, hash, unix_time_ms(), to_release);
    found = obj != nullptr && !obj->partial();
  }
  release_all(to_release);
  return found;
}

bool MemoryTier::holds_version(std::string_view key, uint64_t version) {
  uint64_t hash = hash64(key);
  Shard& s = shard_for(hash);
  MutexLock lock(s.mu);
  auto it = s.index.find(KeyRef{key, hash});
  return it != s.index.end() && (*it)->version() == version;
}

std::optional<ObjectInfo> MemoryTier::stat(std::string_view key) {
  uint64_t hash = hash64(key);
  Shard& s = shard_for(hash);
  ChunkList to_release;
  std::optional<ObjectInfo> info;
  {
    MutexLock lock(s.mu);
    Object* obj = find_live_locked(s, key, hash, unix_time_ms(), to_release);
    if (obj) {
      info.emplace();
      info->version = obj->version();
      info->size = obj->size();
      info->expire_at_ms = expire_at_locked(s, obj);
      info->flash_state = obj->flash_state;
      info->raw_encoding = obj->raw_encoding;
      for (const Chunk* c : obj->chunks()) {
        if (!c) continue;  // a hole: on flash only
        info->chunks.push_back({c->index(), c->size, c->refs() - 1,
                                (c->flags() & Chunk::kLeased) != 0,
                                (c->flags() & Chunk::kUseOnce) != 0});
      }
    }
  }
  release_all(to_release);
  return info;
}

bool MemoryTier::remove(std::string_view key, std::optional<uint64_t> if_version,
                        uint64_t* removed_version) {
  uint64_t hash = hash64(key);
  Shard& s = shard_for(hash);
  ChunkList to_release;
  bool removed = false;
  {
    MutexLock lock(s.mu);
    Object* obj = find_live_locked(s, key, hash, unix_time_ms(), to_release);
    if (obj && (!if_version || obj->version() == *if_version)) {
      if (removed_version) *removed_version = obj->version();
      detach_locked(s, obj, to_release);
      removed = true;
    }
  }
  release_all(to_release);
  return removed;
}

void MemoryTier::set_expiry_locked(Shard& s, Object* obj, int64_t expire_at_ms) {
  s.mu.assert_held();
  if (expire_at_ms == 0) {
    if (obj->has_ttl) s.ttl.remove(obj);
  } else {
    s.ttl.set(obj, expire_at_ms);
  }
  obj->has_ttl = expire_at_ms != 0;
}

bool MemoryTier::set_expiry(std::string_view key, int64_t expire_at_ms) {
  uint64_t hash = hash64(key);
  Shard& s = shard_for(hash);
  ChunkList to_release;
  bool found = false;
  int64_t reserved = 0;
  // If memory is full of pinned data the TTL list still gets its slot:
  // a few bytes over the budget beat losing an expiry.
  bool room = lock_with_index_room(s, hash, expire_at_ms != 0, reserved).is_ok();
  if (room) {
    s.mu.assert_held();  // lock_with_index_room() returned holding it
  } else {
    s.mu.lock();
  }
  {
    AdoptedLock lock(s.mu);
    Object* obj = find_live_locked(s, key, hash, unix_time_ms(), to_release);
    if (obj) {
      set_expiry_locked(s, obj, expire_at_ms);
      found = true;
    }
    settle_index_charge(s, reserved);
  }
  release_all(to_release);
  trim_to_budget();
  return found;
}

Status MemoryTier::grant_lease(std::string_view key, int64_t ttl_ms, bool prefetch,
                               std::optional<uint64_t> version) {
  uint64_t hash = hash64(key);
  Shard& s = shard_for(hash);
  ChunkList to_release;
  Status st;
  int64_t now = unix_time_ms();
  int64_t cap = static_cast<int64_t>(static_cast<double>(budget_bytes()) *
                                     lease_max_fraction_.load(std::memory_order_relaxed));
  {
    MutexLock lock(s.mu);
    Object* obj = find_live_locked(s, key, hash, now, to_release);
    if (!obj || (version && obj->version() != *version)) {
      st = Status::not_found();
    } else {
      // All or nothing: a half-leased object would still be evicted whole.
      int64_t needed = 0;
      for (const Chunk* c : obj->chunks()) {
        if (c && !(c->flags() & Chunk::kLeased)) needed += c->size;
      }
      int64_t cur = leased_.load(std::memory_order_relaxed);
      // At the cap, first retire leases of this shard that ran out unread.
      if (needed > 0 && cur + needed > cap && sweep_leases_locked(s, now, 32) > 0)
        cur = leased_.load(std::memory_order_relaxed);
      do {
        if (needed > 0 && cur + needed > cap) {
          lease_refused_.fetch_add(1, std::memory_order_relaxed);
          st = Status::busy("leased bytes at their cap");
          break;
        }
      } while (!leased_.compare_exchange_weak(cur, cur + needed, std::memory_order_relaxed));
      if (st.is_ok()) {
        for (Chunk* c : obj->chunks()) {
          if (!c) continue;
          set_lease_locked(s, c, now + ttl_ms);
          if (prefetch) c->flags() |= Chunk::kPrefetched;
        }
      }
    }
  }
  release_all(to_release);
  return st;
}

ScanPage MemoryTier::scan(uint64_t cursor, size_t count) {
  ScanPage page;
  count = std::max<size_t>(count, 1);
  int64_t now = unix_time_ms();
  size_t shard = shard_bits_ == 0 ? 0 : cursor >> (64 - shard_bits_);
  for (; shard < shard_count_; ++shard) {
    Shard& s = shards_[shard];
    MutexLock lock(s.mu);
    std::vector<const Object*> candidates;
    for (const Object* o : s.index) {
      if (o->hash() >= cursor && !expired(s, o, now)) candidates.push_back(o);
    }
    size_t want = count - page.keys.size();
    auto by_hash = [](const Object* a, const Object* b) { return a->hash() < b->hash(); };
    if (candidates.size() > want) {
      std::nth_element(candidates.begin(), candidates.begin() + want, candidates.end(), by_hash);
      candidates.resize(want);
      std::sort(candidates.begin(), candidates.end(), by_hash);
      for (const Object* o : candidates) page.keys.emplace_back(o->key());
      uint64_t last = candidates.back()->hash();
      page.next_cursor = last == UINT64_MAX ? 0 : last + 1;
      return page;
    }
    for (const Object* o : candidates) page.keys.emplace_back(o->key());
    cursor = shard_bits_ == 0 ? 0 : (uint64_t{shard} + 1) << (64 - shard_bits_);
    if (page.keys.size() >= count) {
      page.next_cursor = shard + 1 < shard_count_ ? cursor : 0;
      return page;
    }
  }
  page.next_cursor = 0;
  return page;
}

std::optional<std::string> MemoryTier::random_key() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  int64_t now = unix_time_ms();
  size_t start = rng() % shard_count_;
  for (size_t i = 0; i < shard_count_; ++i) {
    Shard& s = shards_[(start + i) % shard_count_];
    MutexLock lock(s.mu);
    if (s.index.empty()) continue;
    size_t skip = rng() % std::min<size_t>(s.index.size(), 64);
    for (const Object* o : s.index) {
      if (skip > 0) {
        --skip;
      } else if (!expired(s, o, now)) {
        return std::string(o->key());
      }
    }
  }
  return std::nullopt;
}

void MemoryTier::clear() {
  for (size_t i = 0; i < shard_count_; ++i) {
    Shard& s = shards_[i];
    ChunkList to_release;
    {
      MutexLock lock(s.mu);
      std::vector<Object*> all(s.index.begin(), s.index.end());
      for (Object* o : all) detach_locked(s, o, to_release);
      ObjectIndex fresh;
      s.index.swap(fresh);
      s.ttl.clear();
      s.leases.clear();
      unreserve(s.index_charge);
      s.index_charge = 0;
    }
    release_all(to_release);
  }
}

size_t MemoryTier::sweep_leases_locked(Shard& s, int64_t now_ms, size_t samples) {
  s.mu.assert_held();
  size_t ended = 0;
  for (const LeaseTable::Entry& lease : s.leases.sample(samples)) {
    if (lease.until_ms > now_ms) continue;
    end_lease_locked(lease.item, false);
    ++ended;
  }
  return ended;
}

size_t MemoryTier::expire_shard(Shard& s, int64_t now_ms) {
  // Redis's active expiry: sample 20 keys with a TTL (the next ones at the
  // table's cursor), delete the expired ones, and go again while more than
  // a quarter of the sample had expired.
  constexpr size_t kSample = 20;
  size_t total = 0;
  for (int round = 0; round < 16; ++round) {
    ChunkList to_release;
    size_t hits = 0, sampled = 0;
    {
      MutexLock lock(s.mu);
      if (round == 0) sweep_leases_locked(s, now_ms, kSample);
      for (const TtlTable::Entry& entry : s.ttl.sample(kSample)) {
        ++sampled;
        if (entry.until_ms > now_ms) continue;
        expire_locked(s, entry.item, to_release);
        ++hits;
      }
    }
    release_all(to_release);
    total += hits;
    expired_objects_.fetch_add(hits, std::memory_order_relaxed);
    if (sampled == 0 || hits * 4 <= sampled) break;
  }
  return total;
}

size_t MemoryTier::expire_cycle(int64_t now_ms) {
  size_t total = 0;
  for (size_t i = 0; i < shard_count_; ++i) total += expire_shard(shards_[i], now_ms);
  return total;
}

void MemoryTier::start_active_expiry(int hz) {
  expiry_.start(hz);
}

void MemoryTier::return_free_memory() {
  // glibc gives each thread its own arena and a chunk freed by another
  // thread goes back to the arena it came from, so with several writers the
  // allocator holds freed chunks worth ~15-40% of the budget (measured: 4
  // writer threads, 256 MiB budget, RSS 300-360 MiB). Hand them back to the
  // kernel once they pass 1/16 of the budget; mallinfo2() is cheap next to
  // that and the trim runs only when it is needed.
  trim_pools();
  struct mallinfo2 info = mallinfo2();
  size_t threshold = static_cast<size_t>(budget_bytes()) / 16 + (size_t{16} << 20);
  if (info.fordblks > threshold) malloc_trim(0);
}

void MemoryTier::stop_active_expiry() {
  expiry_.stop();
}

Status MemoryTier::set_budget(int64_t bytes) {
  budget_.store(bytes, std::memory_order_relaxed);
  trim_pools();
  if (!trim_to_budget()) return Status::out_of_memory("cannot shrink below pinned and leased data");
  return Status::ok();
}

uint64_t MemoryTier::object_count() const {
  uint64_t n = 0;
  for (size_t i = 0; i < shard_count_; ++i) {
    MutexLock lock(shards_[i].mu);
    n += shards_[i].index.size();
  }
  return n;
}

MemoryTierStats MemoryTier::stats() const {
  MemoryTierStats st;
  for (size_t i = 0; i < shard_count_; ++i) {
    MutexLock lock(shards_[i].mu);
    st.objects += shards_[i].index.size();
    st.chunks += shards_[i].chunks;
    st.index_bytes += shards_[i].index_charge;
  }
  st.used_bytes = used_bytes();
  st.budget_bytes = budget_bytes();
  st.leased_bytes = leased_.load();
  evictor_.add_stats(st);
  st.expired_objects = expired_objects_.load();
  st.lease_refused = lease_refused_.load();
  st.lease_expired_unread = lease_expired_unread_.load();
  st.buffer_pool = pool_stats();
  st.prefetch_reads = prefetch_reads_.load();
  st.prefetch_wasted = prefetch_wasted_.load();
  st.offloading_bytes = offloading_bytes_.load();
  st.clean_objects = static_cast<uint64_t>(std::max<int64_t>(clean_objects_.load(), 0));
  st.dirty_bytes = dirty_bytes();
  st.use_once_bytes = use_once_bytes();
  st.use_once_dropped = use_once_dropped();
  return st;
}

}  // namespace tierkv::memory
