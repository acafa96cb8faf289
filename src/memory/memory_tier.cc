#include "memory/memory_tier.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstddef>

#include "core/clock.h"
#include "core/hash.h"
#include "memory/memory_tier_internal.h"

namespace tierkv::memory {

MemoryTier::MemoryTier(const MemoryTierOptions& o)
    : chunk_size_(o.chunk_size),
      buffer_pool_({.buffer_size = o.chunk_size + kBlockSize, .min_size = Chunk::kPooledMin},
                   [this] { return idle_room() - middling_pool_.idle_bytes(); }),
      middling_pool_({.buffer_size = Chunk::kLargeAllocation,
                      .min_size = Chunk::kPooledMin,
                      .granule = kMiddlingGranule,
                      .alignment = alignof(std::max_align_t)},
                     [this] { return idle_room() - buffer_pool_.idle_bytes(); }),
      shard_bits_(static_cast<uint32_t>(std::countr_zero(std::bit_ceil(std::max(o.shards, 1u))))),
      lease_max_fraction_(o.lease_max_fraction),
      shards_(new Shard[size_t{1} << shard_bits_]),
      shard_count_(size_t{1} << shard_bits_),
      budget_(o.budget_bytes),
      next_version_(std::max<uint64_t>(o.first_version, 1)),
      evictor_(*this, o.offload_wait_ms) {
  for (size_t i = 0; i < shard_count_; ++i) {
    Shard& s = shards_[i];
    MutexLock lock(s.mu);
    s.policy = make_policy(o.policy);
    if (o.expected_objects > 0) s.index.reserve(o.expected_objects / shard_count_ + 1);
    s.index_charge = index_table_bytes(s.index.capacity());
    used_.fetch_add(s.index_charge, std::memory_order_relaxed);
  }
}

MemoryTier::~MemoryTier() {
  stop_active_expiry();
  clear();
}

MemoryTier::Shard& MemoryTier::shard_for(uint64_t hash) {
  // Top bits pick the shard, so hash order is (shard, hash) order: SCAN's
  // cursor relies on that.
  return shards_[shard_bits_ == 0 ? 0 : hash >> (64 - shard_bits_)];
}

size_t MemoryTier::policy_overhead() const {
  return shards_[0].policy->overhead_per_entry();
}

size_t MemoryTier::charge_for_object(size_t key_size, uint64_t value_size) const {
  size_t chunks = value_size == 0 ? 1 : (value_size + chunk_size_ - 1) / chunk_size_;
  size_t overhead = policy_overhead();
  if (Object::fits_fused(key_size, value_size, chunk_size_))
    return Object::fused_charge(key_size, value_size) + overhead;
  size_t total = static_cast<size_t>(Object::metadata_charge(key_size, chunks));
  for (size_t i = 0; i < chunks; ++i) {
    uint64_t left = value_size - std::min<uint64_t>(value_size, i * uint64_t{chunk_size_});
    total += chunk_charge(static_cast<uint32_t>(std::min<uint64_t>(left, chunk_size_))) + overhead;
  }
  return total;
}

int64_t MemoryTier::expire_at_locked(const Shard& s, const Object* obj) {
  s.mu.assert_held();
  return obj->has_ttl ? s.ttl.until(obj) : 0;
}

bool MemoryTier::expired(const Shard& s, const Object* obj, int64_t now_ms) const {
  if (!obj->has_ttl) return false;
  return expire_at_locked(s, obj) <= now_ms;
}

void MemoryTier::set_lease_locked(Shard& s, Chunk* c, int64_t until_ms) {
  s.mu.assert_held();
  c->flags() |= Chunk::kLeased;
  s.leases.set(c, until_ms);
}

int64_t MemoryTier::lease_end_locked(const Chunk* c) {
  Shard& s = shard_for(c->owner()->hash());
  s.mu.assert_held();
  return s.leases.until(c);
}

void MemoryTier::end_lease_locked(Chunk* c, bool read) {
  Shard& s = shard_for(c->owner()->hash());
  s.mu.assert_held();
  s.leases.remove(c);
  leased_.fetch_sub(c->size, std::memory_order_relaxed);
  if (!read) lease_expired_unread_.fetch_add(1, std::memory_order_relaxed);
  // An object's prefetch is judged by its first chunk: the one every whole
  // read and every read from the start takes.
  if ((c->flags() & Chunk::kPrefetched) && c->index() == 0)
    (read ? prefetch_reads_ : prefetch_wasted_).fetch_add(1, std::memory_order_relaxed);
  c->flags() &= static_cast<uint8_t>(~(Chunk::kLeased | Chunk::kPrefetched));
}

bool MemoryTier::chunk_evictable(Chunk* c, uint32_t refs, int64_t now_ms) {
  if (c->refs() > refs) return false;
  if (c->flags() & Chunk::kLeased) {
    if (lease_end_locked(c) > now_ms) return false;
    end_lease_locked(c, false);
  }
  return true;
}

bool MemoryTier::evictable(Chunk* c, int64_t now_ms) {
  // A copy under way (kFlushing) holds one pin of its own: that object can
  // still be chosen, and leaves once the copy lands (evict_one).
  Object* obj = c->owner();
  const uint32_t refs = obj->flash_state == FlashState::kFlushing ? 2 : 1;
  // A clean object leaves chunk by chunk: only this one must be free.
  if (lower_ && evicts_by_chunk(obj)) return chunk_evictable(c, refs, now_ms);
  for (Chunk* ch : obj->chunks()) {
    if (ch && !chunk_evictable(ch, refs, now_ms)) return false;
  }
  return true;
}

void MemoryTier::detach_locked(Shard& s, Object* obj, ChunkList& to_release) {
  s.mu.assert_held();
  for (Chunk* c : obj->chunks()) {
    if (!c) continue;
    if (c->hook.linked) {
      if (c->flags() & Chunk::kUseOnce)
        s.use_once.unlink(&c->hook);
      else
        s.policy->remove(&c->hook);
    }
    if (c->flags() & Chunk::kLeased) end_lease_locked(c, false);
    c->detach();
    to_release.push_back(c);
  }
  s.chunks -= obj->resident();
  count_flash_state(obj, obj->flash_state, -1);  // it leaves the index
  set_expiry_locked(s, obj, 0);
  s.index.erase(obj);
  unreserve(obj->charge());
  Object::destroy(obj);
}

void MemoryTier::release_all(ChunkList& chunks) {
  for (Chunk* c : chunks) c->release();
  chunks.clear();
}

int64_t MemoryTier::index_growth_locked(Shard& s, bool adds_ttl) {
  s.mu.assert_held();
  int64_t growth = 0;
  size_t cap = s.index.capacity();
  if (s.index.size() + 1 > cap - cap / 8)
    growth += index_table_bytes(cap * 2 + 1) - index_table_bytes(cap);
  if (adds_ttl) growth += s.ttl.growth_on_insert();
  return growth;
}

// Not analysed: it returns holding s.mu on OK only, which the analysis
// cannot express for a Shard that memory_tier.h sees incomplete.
Status MemoryTier::lock_with_index_room(Shard& s, uint64_t hash, bool adds_ttl,
                                        int64_t& reserved) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // The room is reserved outside the lock (reserving may evict, which locks
  // shards); if a racing insert used it up meanwhile, reserve more and retry.
  for (;;) {
    s.mu.lock();
    int64_t need = index_growth_locked(s, adds_ttl);
    if (need <= reserved) return Status::ok();
    s.mu.unlock();
    Status st = reserve(need - reserved, hash);
    if (!st.is_ok()) {
      unreserve(std::exchange(reserved, 0));
      return st;
    }
    reserved = need;
  }
}

// Brings the shard's index charge up to date after an insert; `reserved`
// was set aside for it under the same lock. It can still fall short: abseil
// also grows a small or tombstone-heavy table early. The caller then calls
// trim_to_budget() once the lock is released.
void MemoryTier::settle_index_charge(Shard& s, int64_t reserved) {
  s.mu.assert_held();
  int64_t now = index_table_bytes(s.index.capacity()) + s.ttl.bytes();
  int64_t delta = now - s.index_charge;
  s.index_charge = now;
  if (delta > reserved)
    used_.fetch_add(delta - reserved, std::memory_order_relaxed);
  else
    unreserve(reserved - delta);
}

size_t MemoryTier::chunk_charge(uint32_t len) const {
  if (len == chunk_size_) return Chunk::charge_in_buffer(buffer_pool_.buffer_size());
  if (len >= Chunk::kPooledMin && len < Chunk::kLargeAllocation)
    return Chunk::charge_in_buffer(middling_pool_.rounded(len));
  return Chunk::charge_for(len);
}

int64_t MemoryTier::idle_room() const {
  int64_t unused = budget_.load(std::memory_order_relaxed) - used_.load(std::memory_order_relaxed);
  return std::max<int64_t>(unused, 0) + buffer_pool_headroom_.load(std::memory_order_relaxed);
}

void MemoryTier::trim_pools() {
  buffer_pool_.trim();
  middling_pool_.trim();
}

BufferPoolStats MemoryTier::pool_stats() const {
  BufferPoolStats st = buffer_pool_.stats();
  st += middling_pool_.stats();
  return st;
}

Chunk* MemoryTier::new_chunk(uint32_t len, uint32_t charge, uint64_t hash, uint32_t index) {
  Chunk* c = new_chunk_bytes(len, charge);
  static_cast<SeparateChunk*>(c)->index = index;
  c->hook.id = chunk_hash(hash, index);
  return c;
}

Chunk* MemoryTier::new_chunk_bytes(uint32_t len, uint32_t charge) {
  // A full chunk is charged what a pooled buffer holds. A short large one
  // gets a pooled buffer one block longer than its bytes: the size a flash
  // read of it (record header and bytes) takes, so that written and
  // promoted chunks of one size share buffers, and a promotion can swap in
  // the read's buffer (Chunk::adopt). A middling one (Chunk::kPooledMin up)
  // gets a buffer of its whole granules from the middling pool: one block
  // more would cost a 16 KiB value a quarter of its size, where copying a
  // promotion's bytes into a pooled buffer is cheap. A small one is inline.
  if (len == chunk_size_)
    return Chunk::allocate_in(buffer_pool_.take(buffer_pool_.buffer_size()), 0, len, charge,
                              budget_slot_.id());
  if (len >= Chunk::kPooledMin) {
    BufferPool& pool = len >= Chunk::kLargeAllocation ? buffer_pool_ : middling_pool_;
    const size_t buffer = len >= Chunk::kLargeAllocation ? align_up(len + 1) : len;
    return Chunk::allocate_in(pool.take(buffer), 0, len, charge, budget_slot_.id());
  }
  return Chunk::allocate(len, charge, budget_slot_.id());
}

Chunk* MemoryTier::new_fused_chunk(std::string_view key, uint64_t hash, uint32_t len,
                                   uint32_t charge) {
  return Object::create_fused(key, hash, len, charge, budget_slot_.id());
}

Result<ObjectWriter> MemoryTier::prepare_fused(std::string_view key, uint64_t hash, uint64_t size,
                                               int64_t max_bytes) {
  auto charge = static_cast<int64_t>(charge_for_object(key.size(), size));
  if (charge > max_bytes)
    return Status::out_of_memory("no room in memory for any chunk of the object");
  TIERKV_RETURN_IF_ERROR(reserve(charge, hash));
  ChunkList chunks{
      new_fused_chunk(key, hash, static_cast<uint32_t>(size), static_cast<uint32_t>(charge))};
  // The block is not from the pool: the idle buffers may now pass the room.
  trim_pools();
  return ObjectWriter(this, std::string(key), hash, size, std::move(chunks), 0);
}

Result<ObjectWriter> MemoryTier::prepare(std::string_view key, uint64_t size) {
  uint64_t hash = hash64(key);
  if (Object::fits_fused(key.size(), size, chunk_size_))
    return prepare_fused(key, hash, size, INT64_MAX);
  size_t count = size == 0 ? 1 : (size + chunk_size_ - 1) / chunk_size_;
  int64_t meta = Object::metadata_charge(key.size(), count);
  int64_t total = static_cast<int64_t>(charge_for_object(key.size(), size));
  TIERKV_RETURN_IF_ERROR(reserve(total, hash));
  size_t overhead = policy_overhead();
  ChunkList chunks;
  chunks.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    uint64_t left = size - std::min<uint64_t>(size, i * uint64_t{chunk_size_});
    uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(left, chunk_size_));
    chunks.push_back(new_chunk(len, static_cast<uint32_t>(chunk_charge(len) + overhead), hash,
                               static_cast<uint32_t>(i)));
  }
  // The bytes not taken from the pool (metadata, a short last chunk) may
  // leave less room than the idle buffers hold.
  trim_pools();
  return ObjectWriter(this, std::string(key), hash, size, std::move(chunks), meta);
}

Result<ObjectWriter> MemoryTier::prepare_partial(std::string_view key, uint64_t size,
                                                 int64_t max_bytes) {
  uint64_t hash = hash64(key);
  if (Object::fits_fused(key.size(), size, chunk_size_))
    return prepare_fused(key, hash, size, max_bytes);
  size_t count = size == 0 ? 1 : (size + chunk_size_ - 1) / chunk_size_;
  int64_t meta = Object::metadata_charge(key.size(), count);
  TIERKV_RETURN_IF_ERROR(reserve(meta, hash));
  size_t overhead = policy_overhead();
  ChunkList chunks(count, nullptr);
  int64_t taken = meta;
  // From the front: readers start there, and what they reach later has
  // time to come from flash.
  for (size_t i = 0; i < count; ++i) {
    uint64_t left = size - std::min<uint64_t>(size, i * uint64_t{chunk_size_});
    uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(left, chunk_size_));
    auto charge = static_cast<uint32_t>(chunk_charge(len) + overhead);
    if (taken + charge > max_bytes || !reserve(charge, hash).is_ok()) break;
    taken += charge;
    chunks[i] = new_chunk(len, charge, hash, static_cast<uint32_t>(i));
  }
  if (chunks[0] == nullptr) {
    unreserve(meta);
    return Status::out_of_memory("no room in memory for any chunk of the object");
  }
  trim_pools();
  return ObjectWriter(this, std::string(key), hash, size, std::move(chunks), meta);
}

Result<WriteResult> MemoryTier::put(std::string_view key, std::string_view value,
                                    const WriteOptions& options) {
  Result<ObjectWriter> w = prepare(key, value.size());
  if (!w) return w.status();
  w->append(value);
  return publish(std::move(*w), options);
}

AbsentWatches::Handle MemoryTier::watch_absent(std::string_view key) {
  return absent_watches_->watch(hash64(key));
}

void MemoryTier::note_created(std::string_view key) {
  absent_watches_->note_created(hash64(key));
}

void MemoryTier::raise_next_version(uint64_t first) {
  uint64_t now = next_version_.load();
  while (now < first && !next_version_.compare_exchange_weak(now, first)) {
  }
}

Result<WriteResult> MemoryTier::publish(ObjectWriter&& writer, const WriteOptions& opts) {
  if (writer.tier_ == nullptr)
    return Status::invalid_argument("writer is empty (moved from or already published)");
  if (writer.tier_ != this) return Status::invalid_argument("writer does not belong to this tier");
  if (writer.filled_ != writer.size_)
    return Status::invalid_argument(
        fmt::format("object incomplete: {} of {} bytes written", writer.filled_, writer.size_));
  const auto resident = static_cast<uint32_t>(
      std::count_if(writer.chunks_.begin(), writer.chunks_.end(), [](Chunk* c) { return c; }));
  // Holes are read from the lower tier: only a copy of a version it holds
  // may have them.
  if (resident < writer.chunks_.size() && opts.install_version == 0)
    return Status::invalid_argument("a partial object must be a copy of a lower-tier version");
  Shard& s = shard_for(writer.hash_);
  WriteResult result;
  ChunkList to_release;
  int64_t now = 0;  // read only if the old version has a TTL or lease
  int64_t index_reserve = 0;
  bool adds_ttl = opts.expire_at_ms != 0 || opts.keep_ttl;
  TIERKV_RETURN_IF_ERROR(lock_with_index_room(s, writer.hash_, adds_ttl, index_reserve));
  {
    s.mu.assert_held();  // lock_with_index_room() returned holding it
    AdoptedLock lock(s.mu);
    Object* old = find_live_locked(s, writer.key_, writer.hash_, now, to_release);
    if (old && opts.return_previous && range_resident(old, 0, old->size()))
      result.previous = view_locked(s, old, GetOptions{.touch = false}, now);
    bool ok = true;
    switch (opts.condition) {
      case WriteCondition::kAlways:
        break;
      case WriteCondition::kIfAbsent:
        // A partial copy of the version being installed is filled in.
        ok = old == nullptr || (old->partial() && opts.install_version != 0 &&
                                old->version() == opts.install_version);
        break;
      case WriteCondition::kIfPresent:
        ok = old != nullptr;
        break;
      case WriteCondition::kIfVersion:
        ok = (old ? old->version() : 0) == opts.expected_version;
        break;
    }
    if (ok) {
      Chunk* first = writer.chunks_[0];
      Object* obj = first != nullptr && first->fused
                        ? Object::of_fused(first)
                        : Object::create(writer.key_, writer.hash_, writer.size_,
                                         static_cast<uint32_t>(writer.chunks_.size()));
      if (opts.install_version != 0) {
        obj->set_version(opts.install_version);
        obj->flash_state = FlashState::kClean;
      } else {
        obj->set_version(next_version_.fetch_add(1, std::memory_order_relaxed));
      }
      writer.meta_charge_ = 0;  // obj->charge() now
      obj->raw_encoding = opts.raw_encoding;
      int64_t expire_at = opts.keep_ttl && old ? expire_at_locked(s, old) : opts.expire_at_ms;
      if (old) {
        detach_locked(s, old, to_release);
      } else {
        absent_watches_->note_created(writer.hash_);
      }
      for (size_t i = 0; i < writer.chunks_.size(); ++i) {
        Chunk* c = writer.chunks_[i];
        if (!obj->fused()) obj->set_chunk(i, c);
        if (!c) continue;
        c->set_owner(obj);
        if (opts.use_once) {
          c->flags() |= Chunk::kUseOnce;
          s.use_once.push_front(&c->hook);
        } else {
          s.policy->insert(&c->hook);
        }
      }
      if (!obj->fused()) obj->set_resident(resident);
      s.chunks += resident;
      count_flash_state(obj, obj->flash_state, +1);  // it enters the index
      writer.chunks_.clear();
      s.index.insert(obj);
      set_expiry_locked(s, obj, expire_at);
      result.written = true;
      result.version = obj->version();
    }
    settle_index_charge(s, index_reserve);
  }
  release_all(to_release);
  writer.reset();
  trim_to_budget();
  return result;
}

void MemoryTier::note_read_locked(Chunk* c, const GetOptions& o, int64_t& now_ms) {
  // An offloading object's chunks have left the policy (hook unlinked).
  if (o.touch && c->hook.linked) {
    Shard& s = shard_for(c->owner()->hash());
    s.mu.assert_held();
    if (!(c->flags() & Chunk::kUseOnce)) {
      s.policy->touch(&c->hook);
    } else if (!o.use_once) {
      // Read by someone who is not streaming past: it is worth keeping.
      s.use_once.unlink(&c->hook);
      c->flags() &= static_cast<uint8_t>(~Chunk::kUseOnce);
      s.policy->insert(&c->hook);
    }
  }
  if (o.end_lease && (c->flags() & Chunk::kLeased)) {
    if (now_ms == 0) now_ms = unix_time_ms();
    end_lease_locked(c, lease_end_locked(c) > now_ms);
  }
}

bool MemoryTier::range_resident(const Object* obj, uint64_t offset, uint64_t length) const {
  if (!obj->partial()) return true;
  offset = std::min(offset, obj->size());
  length = std::min(length, obj->size() - offset);
  if (length == 0) return true;
  for (size_t i = offset / chunk_size_; i <= (offset + length - 1) / chunk_size_; ++i)
    if (!obj->chunk(i)) return false;
  return true;
}

ObjectView MemoryTier::view_locked(const Shard& s, Object* obj, const GetOptions& o,
                                   int64_t now_ms) {
  uint64_t offset = std::min(o.offset, obj->size());
  uint64_t length = std::min(o.length, obj->size() - offset);
  absl::InlinedVector<ChunkPin, 2> pins;
  if (length > 0) {
    size_t first = offset / chunk_size_;
    size_t last = (offset + length - 1) / chunk_size_;
    for (size_t i = first; i <= last; ++i) {
      Chunk* c = obj->chunk(i);
      pins.emplace_back(c);
      note_read_locked(c, o, now_ms);
    }
  }
  return ObjectView(obj->version(), obj->size(), expire_at_locked(s, obj), offset, length,
                    std::move(pins), chunk_size_);
}

Result<ObjectView> MemoryTier::get(std::string_view key, const GetOptions& options) {
  uint64_t hash = hash64(key);
  Shard& s = shard_for(hash);
  int64_t now = 0;  // the clock is read only for objects with a TTL or lease
  ChunkList to_release;
  Result<ObjectView> out = Status::not_found();
  {
    MutexLock lock(s.mu);
    Object* obj = find_live_locked(s, key, hash, now, to_release);
    // A range that crosses a hole is not memory's to answer (resident_chunks).
    if (obj && range_resident(obj, options.offset, options.length)) {
      out = view_locked(s, obj, options, now);
      if (options.use_once) drop_use_once_locked(s, obj, to_release);
    }
  }
  release_all(to_release);
  return out;
}

std::vector<ChunkPin> MemoryTier::resident_chunks(std::string_view key, uint64_t version,
                                                  uint32_t first, uint32_t last,
                                                  const GetOptions& options) {
  uint64_t hash = hash64(key);
  Shard& s = shard_for(hash);
  int64_t now = 0;
  ChunkList to_release;
  std::vector<ChunkPin> pins;
  {
    MutexLock lock(s.mu);
    Object* obj = find_live_locked(s, key, hash, now, to_release);
    if (obj && obj->version() == version && last < obj->chunk_count()) {
      pins.resize(last - first + 1);
      for (uint32_t i = first; i <= last; ++i) {
        Chunk* c = obj->chunk(i);
        if (!c) continue;
        pins[i - first] = ChunkPin(c);
        note_read_locked(c, options, now);
      }
    }
  }
  release_all(to_release);
  return pins;
}

}  // namespace tierkv::memory
