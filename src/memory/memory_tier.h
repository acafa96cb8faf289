// MemoryTier: the DRAM tier. A byte-budgeted, sharded cache of chunked objects.
//
// * Budget: every byte the tier holds is charged to one counter: chunk
//   buffers (as allocated), chunk and object metadata, the index tables and
//   the policy's per-entry overhead. reserve() never lets it pass the budget;
//   it evicts first, or fails with OutOfMemory.
// * Versions: a write builds a complete new object off to the side and swaps
//   it into the index under the shard lock. Readers pin the chunks of the
//   version they found, so an overwrite never tears a read.
// * Pins and leases: a pinned chunk (being read) or a leased chunk (promised
//   to an upcoming reader) is never chosen for eviction. Leased bytes are
//   capped at lease_max_fraction of the budget.
// * Expiry: lazy on access, plus active sampling (Redis's algorithm) from a
//   background thread when start_active_expiry() is called.
// * Use-once lane: chunks written with use_once are evicted before anything
//   the policy holds, so a streaming scan cannot push out hot data.
//
// * Lower tier: with a LowerTier set (the store's flash tier), an evicted
//   object that exists nowhere else is written there first; it stays
//   readable, and charged, until the write lands (see lower_tier.h).
//
// * Residency by chunk: a clean object (its version is on the lower tier)
//   may be held in part. Eviction takes such an object's chunks one by one,
//   and prepare_partial() copies in what fits of one larger than memory.
//   get() answers only ranges held whole; resident_chunks() hands a reader
//   the chunks held, and the reader takes the rest from the lower tier. A
//   dirty object is held whole, and evicted (offloaded) whole.
//
// Thread-safe.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/container/inlined_vector.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/buffer_pool.h"
#include "core/status.h"
#include "memory/absent_watches.h"
#include "memory/active_expiry.h"
#include "memory/chunk.h"
#include "memory/evictor.h"
#include "memory/lower_tier.h"
#include "memory/object_view.h"
#include "memory/object_writer.h"
#include "memory/policy/eviction_policy.h"
#include "memory/value_sink.h"

namespace tierkv::memory {

struct MemoryTierOptions {
  int64_t budget_bytes = int64_t{1} << 30;
  uint32_t chunk_size = 1 << 20;  // power of two
  PolicyKind policy = PolicyKind::kS3Fifo;
  uint32_t shards = 32;  // power of two
  double lease_max_fraction = 0.25;
  // Pre-sizes the index for this many objects (its bytes are charged at once).
  size_t expected_objects = 0;
  // Versions start here (above every version the lower tier already holds).
  uint64_t first_version = 1;
  // How long a write waits for offloads to land before OutOfMemory.
  int64_t offload_wait_ms = 2000;
};

enum class WriteCondition : uint8_t { kAlways, kIfAbsent, kIfPresent, kIfVersion };

struct WriteOptions {
  WriteCondition condition = WriteCondition::kAlways;
  uint64_t expected_version = 0;  // for kIfVersion; 0 means "absent"
  int64_t expire_at_ms = 0;       // unix ms; 0 = no expiry
  bool keep_ttl = false;          // keep the old object's expiry
  bool return_previous = false;   // pin and return the replaced version
  bool use_once = false;          // put the chunks in the use-once lane
  // Nonzero: the value is a copy of this version read from the lower tier
  // (a promotion). It keeps that version and starts clean.
  uint64_t install_version = 0;
  // The value was edited in place (APPEND to a key, SETRANGE, SETBIT,
  // BITFIELD): OBJECT ENCODING answers "raw" for it, as Redis does, while
  // memory holds it.
  bool raw_encoding = false;
};

struct WriteResult {
  bool written = false;
  uint64_t version = 0;  // of the new object, if written
  std::optional<ObjectView> previous;
};

struct GetOptions {
  uint64_t offset = 0;
  uint64_t length = UINT64_MAX;  // clipped to the object
  bool touch = true;             // count as an access for the policy
  bool end_lease = true;         // a read consumes a prefetch lease
  // A use-once reader (TIER.READ USEONCE, a use-once stream): it never moves
  // a use-once chunk out of the lane, and an object of the lane it read is
  // dropped at once if it is clean and no one else pins it. Any other
  // reader that touches a use-once chunk takes it out of the lane: the
  // object is not use-once for that reader.
  bool use_once = false;
};

struct ChunkInfo {
  uint32_t index = 0;
  uint32_t size = 0;
  uint32_t pins = 0;
  bool leased = false;
  bool use_once = false;
};

struct ObjectInfo {
  uint64_t version = 0;
  uint64_t size = 0;
  int64_t expire_at_ms = 0;
  FlashState flash_state = FlashState::kDirty;
  std::vector<ChunkInfo> chunks;
  bool raw_encoding = false;  // see WriteOptions::raw_encoding
};

struct MemoryTierStats {
  int64_t used_bytes = 0;
  int64_t budget_bytes = 0;
  int64_t index_bytes = 0;
  int64_t leased_bytes = 0;
  uint64_t objects = 0;
  uint64_t chunks = 0;
  uint64_t evicted_objects = 0;
  uint64_t evicted_chunks = 0;
  uint64_t expired_objects = 0;
  uint64_t lease_refused = 0;
  uint64_t lease_expired_unread = 0;
  uint64_t prefetch_reads = 0;     // prefetched objects whose lease a read ended
  uint64_t prefetch_wasted = 0;    // prefetched objects whose lease ended unread
  int64_t offloading_bytes = 0;    // evicted, waiting for their lower-tier write
  uint64_t offloads_inflight = 0;  // lower-tier writes not yet finished
  uint64_t offloads = 0;           // objects handed to the lower tier on eviction
  uint64_t offload_busy = 0;       // evictions refused by a full lower-tier queue
  uint64_t offload_dropped = 0;    // dirty objects dropped: the lower tier failed
  uint64_t offload_waits = 0;      // writes that waited for offloads to land
  uint64_t clean_objects = 0;      // objects in memory whose version the lower tier holds
  int64_t use_once_bytes = 0;      // look-ahead data charged to the use-once lane
  BufferPoolStats buffer_pool;     // chunk buffers kept mapped for reuse
  uint64_t use_once_dropped = 0;   // use-once chunks dropped once served
  int64_t dirty_bytes = 0;         // chunk charge of objects that exist only here (kDirty)
};

struct ScanPage {
  uint64_t next_cursor = 0;  // 0: iteration complete
  std::vector<std::string> keys;
};

class MemoryTier {
 public:
  explicit MemoryTier(const MemoryTierOptions& options);
  ~MemoryTier();
  MemoryTier(const MemoryTier&) = delete;
  MemoryTier& operator=(const MemoryTier&) = delete;

  // Two-step write: reserve chunk buffers (evicting if needed), fill them,
  // then publish() makes them visible as one new version.
  Result<ObjectWriter> prepare(std::string_view key, uint64_t size);
  Result<WriteResult> publish(ObjectWriter&& writer, const WriteOptions& options = {});
  // publish() of a copy of the lower tier's `version` of the key (a
  // promotion, a preheat's memory copy): it keeps that version, starts
  // clean, and goes in only if memory holds no version of the key.
  Result<WriteResult> install_copy(ObjectWriter&& writer, uint64_t version, int64_t expire_at_ms) {
    return publish(std::move(writer), WriteOptions{.condition = WriteCondition::kIfAbsent,
                                                   .expire_at_ms = expire_at_ms,
                                                   .install_version = version});
  }
  // A writer for a copy of a lower-tier version that may be only partly
  // held: chunks are reserved from the first on while they fit within
  // `max_bytes` (metadata included) and reserve() finds room; the rest are
  // holes (chunk_data() is null there), which readers take from the lower
  // tier. Publish it with install_version. OutOfMemory if not even the
  // first chunk fits.
  Result<ObjectWriter> prepare_partial(std::string_view key, uint64_t size, int64_t max_bytes);
  // Convenience: prepare + copy + publish.
  Result<WriteResult> put(std::string_view key, std::string_view value,
                          const WriteOptions& options = {});

  Result<ObjectView> get(std::string_view key, const GetOptions& options = {});
  // The chunks first..last of `version` of `key` that memory holds, pinned
  // (entry i is chunk first + i; empty where memory lacks it), each counted
  // as read as get() would. Empty if memory holds no object of that
  // version: for reads of a partly resident object, which take the other
  // chunks from the lower tier. (get() answers only a range it holds whole.)
  std::vector<ChunkPin> resident_chunks(std::string_view key, uint64_t version, uint32_t first,
                                        uint32_t last, const GetOptions& options = {});
  // Presence of the whole object without side effects on the policy (lazy
  // expiry still applies): false for one held only in part.
  bool contains(std::string_view key);
  std::optional<ObjectInfo> stat(std::string_view key);
  // True if `version` is the key's object in memory (expired or not): for
  // the lower tier, to learn whether a copy it accepted is still wanted.
  bool holds_version(std::string_view key, uint64_t version);
  // With if_version, removes only that version (compare-and-delete). The
  // version removed goes to *removed_version, if given.
  bool remove(std::string_view key, std::optional<uint64_t> if_version = std::nullopt,
              uint64_t* removed_version = nullptr);

  // expire_at_ms = 0 clears the expiry. False if the key is absent.
  bool set_expiry(std::string_view key, int64_t expire_at_ms);
  // Leases protect the object's resident chunks until ttl ends or a get.
  // A prefetch lease also counts, when it ends, whether a read used it
  // (MemoryTierStats::prefetch_reads / prefetch_wasted). With `version`,
  // only that version of the key is leased (NotFound if the key now holds
  // another): a lease promised to an installed copy never passes to a value
  // written after it.
  Status grant_lease(std::string_view key, int64_t ttl_ms, bool prefetch = false,
                     std::optional<uint64_t> version = std::nullopt);

  ScanPage scan(uint64_t cursor, size_t count);
  std::optional<std::string> random_key();
  void clear();

  // One active-expiry pass over every shard; returns keys expired.
  size_t expire_cycle(int64_t now_ms);
  // Sets the active expiry rate (cycles per second; 0: lazy expiry only) and
  // starts the background thread if it is not running. Callable at any time:
  // the thread picks up a new rate at once.
  void start_active_expiry(int hz);
  void stop_active_expiry();
  // Share of the budget that leases may protect (CONFIG SET). Leases already
  // granted stay until they end; only new ones see a lower cap.
  void set_lease_max_fraction(double fraction) { lease_max_fraction_.store(fraction); }

  // --- the lower tier (set once, before any traffic) ---
  void set_lower_tier(LowerTier* lower) { lower_ = lower; }
  // Reports a lower-tier write of `version` done: a write-through copy makes
  // the object clean (or dirty again on failure); an offload lets the object
  // leave memory. `offload` says which the item was; `written_expire_at_ms`
  // is the expiry the copy was written with (if the object's changed since,
  // the lower tier is told to reconcile).
  void finish_flash_write(std::string_view key, uint64_t version, bool offload, bool ok,
                          int64_t written_expire_at_ms = 0);
  // Write-through: pins a dirty object of `version` for copying down and
  // marks it kFlushing. Empty if it is gone, replaced, or not dirty. With
  // `in_flight_too`, also pins an object whose write is already under way
  // (for a caller that must know when *a* copy has landed).
  std::optional<OffloadItem> begin_flush(std::string_view key, uint64_t version,
                                         bool in_flight_too = false);
  // Clean shutdown: begin_flush() for every dirty object, handed to `fn`
  // outside the shard locks.
  void flush_all_dirty(const std::function<void(OffloadItem&&)>& fn);
  void set_offload_wait_ms(int64_t ms) { evictor_.set_offload_wait_ms(ms); }
  // --- background writeback (driven by the store's Writeback) ---
  // Chunk charge of the indexed objects that exist only here (kDirty).
  int64_t dirty_bytes() const { return dirty_bytes_.load(std::memory_order_relaxed); }
  // Write-through of the coldest dirty objects: visits shards round-robin
  // and, in each, the policy's entries from the coldest (at most
  // `max_steps` of them per shard, each walk resuming where the last one
  // stopped), taking dirty, unexpired objects until their chunk charge
  // reaches `max_bytes` (the last one taken may pass it). Each is marked
  // kFlushing and returned pinned, as begin_flush() does; empty without a
  // lower tier.
  std::vector<OffloadItem> take_cold_dirty(int64_t max_bytes, size_t max_steps);
  // The newest version handed out so far.
  uint64_t max_version() const { return next_version_.load() - 1; }
  // A version for an object written past this tier, straight to the lower
  // one (a staged put): above every version handed out before it.
  uint64_t take_version() { return next_version_.fetch_add(1, std::memory_order_relaxed); }
  // WATCH of an absent key (absent_watches.h). Writes here note the keys
  // they create; a staged object made visible on the lower tier is noted by
  // its writer.
  AbsentWatches::Handle watch_absent(std::string_view key);
  void note_created(std::string_view key);
  // New versions start at `first` or above (a lower tier recovered later
  // than the tier was made holds versions up to first - 1).
  void raise_next_version(uint64_t first);
  // While alive, writes on this thread never wait for offloads (promotion
  // and I/O-completion threads, which the offloads themselves need).
  class NoWaitScope {
   public:
    NoWaitScope();
    ~NoWaitScope();
    NoWaitScope(const NoWaitScope&) = delete;
    NoWaitScope& operator=(const NoWaitScope&) = delete;

   private:
    bool saved_;
  };
  // While alive, reservations on this thread make room only by dropping
  // clean objects (their version is below) that are unleased and unpinned:
  // they never start an offload and never wait. For speculative promotions
  // (prefetch, demand kick): evicting a clean object costs a future read,
  // evicting a dirty one would cost a write now.
  class CleanOnlyScope {
   public:
    CleanOnlyScope();
    ~CleanOnlyScope();
    CleanOnlyScope(const CleanOnlyScope&) = delete;
    CleanOnlyScope& operator=(const CleanOnlyScope&) = delete;

   private:
    NoWaitScope no_wait_;
    bool saved_;
  };

  Status set_budget(int64_t bytes);
  MemoryTierStats stats() const;
  uint64_t object_count() const;
  uint32_t chunk_size() const { return chunk_size_; }
  // Full chunks' buffers, kept for the next chunk or flash read. The idle
  // buffers stay within the unused budget plus `headroom` (the store: the
  // flash read buffers' budget, whose buffers come from here too).
  BufferPool& buffer_pool() { return buffer_pool_; }
  void set_buffer_pool_headroom(int64_t bytes) {
    buffer_pool_headroom_.store(bytes, std::memory_order_relaxed);
  }
  int64_t used_bytes() const { return used_.load(std::memory_order_relaxed); }
  int64_t budget_bytes() const { return budget_.load(std::memory_order_relaxed); }
  int64_t leased_bytes() const { return leased_.load(std::memory_order_relaxed); }
  // The most bytes leases may protect now (lease-max-fraction of the budget).
  int64_t lease_cap_bytes() const {
    return static_cast<int64_t>(static_cast<double>(budget_bytes()) * lease_max_fraction_.load());
  }
  // --- the use-once lane's share of the budget (stream look-ahead) ---
  // Charges `bytes` held outside the index (look-ahead buffers of a stream)
  // to the budget as use-once data: at most use_once_max_fraction of the
  // budget in all, and room is made only by dropping use-once objects,
  // never anything the policy holds, so a scan cannot push hot data out.
  // Busy at the cap, OutOfMemory without room; never waits.
  Status charge_use_once(int64_t bytes);
  void uncharge_use_once(int64_t bytes);
  void set_use_once_max_fraction(double fraction) { use_once_max_fraction_.store(fraction); }
  int64_t use_once_bytes() const { return use_once_bytes_.load(std::memory_order_relaxed); }
  uint64_t use_once_dropped() const { return use_once_dropped_.load(std::memory_order_relaxed); }
  // Counts use-once chunks dropped after they were served outside the index.
  void note_use_once_dropped(uint64_t chunks) {
    use_once_dropped_.fetch_add(chunks, std::memory_order_relaxed);
  }

  uint64_t prefetch_reads() const { return prefetch_reads_.load(std::memory_order_relaxed); }
  // A read that took a prefetched object before its lease began (it read
  // along with the prefetch) counts as a prefetch read all the same.
  void count_prefetch_read() { prefetch_reads_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t prefetch_wasted() const { return prefetch_wasted_.load(std::memory_order_relaxed); }
  // What one object of this key and value length costs the budget.
  size_t charge_for_object(size_t key_size, uint64_t value_size) const;
  // The policy's bytes per entry. Not analysed: each shard's policy is
  // made in the constructor and never replaced, so reading it needs no lock.
  size_t policy_overhead() const ABSL_NO_THREAD_SAFETY_ANALYSIS;

 private:
  friend class ObjectWriter;
  friend class Evictor;
  using Shard = MemoryShard;

  Shard& shard_for(uint64_t hash);
  // Adds `bytes` to used_ without passing the budget, evicting as needed.
  Status reserve(int64_t bytes, uint64_t home_hash) { return evictor_.reserve(bytes, home_hash); }
  void unreserve(int64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }
  // After a use-once read of obj: drops it if it is all use-once, clean
  // below and pinned by nobody but that reader.
  void drop_use_once_locked(Shard& s, Object* obj, ChunkList& to_release);
  // True if the object is clean and the lower tier still holds its version.
  bool clean_below(const Object* obj) const;
  OffloadItem make_item_locked(const Shard& s, Object* obj, bool evicted);
  bool evictable(Chunk* c, int64_t now_ms);
  // A clean object of several chunks leaves memory one chunk at a time
  // (the lower tier holds them all): the chunk is the unit of residency.
  static bool evicts_by_chunk(const Object* obj);
  // Unpinned (beyond `refs`) and unleased; ends a lease that ran out.
  bool chunk_evictable(Chunk* c, uint32_t refs, int64_t now_ms);
  // Every chunk of [offset, offset + length) is in memory.
  bool range_resident(const Object* obj, uint64_t offset, uint64_t length) const;
  // A read of c: the policy's touch, the end of a lease.
  void note_read_locked(Chunk* c, const GetOptions& o, int64_t& now_ms);
  void detach_locked(Shard& s, Object* obj, ChunkList& to_release);
  void release_all(ChunkList& chunks);
  bool expired(const Shard& s, const Object* obj, int64_t now_ms) const;
  // The object's expiry (unix ms), 0 for none: the shard's TTL table.
  static int64_t expire_at_locked(const Shard& s, const Object* obj);
  // Drops an expired object; a copy below it is told (reconcile_expiry).
  void expire_locked(Shard& s, Object* obj, ChunkList& to_release);
  static int64_t chunk_charge(const Object* obj);
  // The live object for a key, expiring it lazily if it is due. now == 0:
  // read the clock if the object has an expiry.
  Object* find_live_locked(Shard& s, std::string_view key, uint64_t hash, int64_t now,
                           ChunkList& to_release);
  // Bytes the shard's index (and TTL list, if adds_ttl) may grow by on one
  // more insert.
  int64_t index_growth_locked(Shard& s, bool adds_ttl);
  // Locks s.mu with index_growth_locked() bytes held in `reserved` (which
  // may already hold some); on error the lock is not held and nothing is.
  Status lock_with_index_room(Shard& s, uint64_t hash, bool adds_ttl, int64_t& reserved);
  void settle_index_charge(Shard& s, int64_t reserved);
  bool trim_to_budget() { return evictor_.trim_to_budget(); }
  // now_ms == 0: read the clock if a lease needs it.
  ObjectView view_locked(const Shard& s, Object* obj, const GetOptions& options, int64_t now_ms);
  // Leases c until until_ms (a new lease, or a leased chunk's new end).
  void set_lease_locked(Shard& s, Chunk* c, int64_t until_ms);
  // c must still be attached (c->owner set): its shard's lock is held.
  int64_t lease_end_locked(const Chunk* c);
  void end_lease_locked(Chunk* c, bool read);
  // Ends up to `samples` randomly chosen leases that ran out; returns how many.
  size_t sweep_leases_locked(Shard& s, int64_t now_ms, size_t samples);
  void set_expiry_locked(Shard& s, Object* obj, int64_t expire_at_ms);
  size_t expire_shard(Shard& s, int64_t now_ms);
  // Returns memory freed to the allocator to the kernel when it holds much
  // of it (run by the active expiry thread).
  void return_free_memory();

  // First member, so that it outlives every chunk: they credit used_
  // through it.
  BudgetSlot budget_slot_{&used_};
  const uint32_t chunk_size_;
  std::atomic<int64_t> buffer_pool_headroom_{0};
  // Before shards_, so that they outlive every chunk the index holds.
  // buffer_pool_: full chunks, chunks from Chunk::kLargeAllocation up and
  // flash reads, aligned for direct I/O. middling_pool_: chunks of
  // Chunk::kPooledMin to kLargeAllocation, which only take copies, so
  // aligned as malloc aligns (no fragment beside each buffer) and rounded
  // to kMiddlingGranule, not whole blocks (6.5 % of a 50,000 B value).
  // Together their idle buffers stay within idle_room().
  static constexpr size_t kMiddlingGranule = 1024;
  BufferPool buffer_pool_;
  BufferPool middling_pool_;
  // What idle pooled buffers may hold: the unused budget plus the headroom.
  int64_t idle_room() const;
  void trim_pools();
  BufferPoolStats pool_stats() const;
  // Chunk `index` of a separate object: `len` bytes (full ones in a pooled
  // buffer), charge reserved.
  Chunk* new_chunk(uint32_t len, uint32_t charge, uint64_t hash, uint32_t index);
  Chunk* new_chunk_bytes(uint32_t len, uint32_t charge);
  // prepare() of a fused object (Object::fits_fused), within max_bytes.
  Result<ObjectWriter> prepare_fused(std::string_view key, uint64_t hash, uint64_t size,
                                     int64_t max_bytes);
  // The one chunk of a fused object (Object::fits_fused), charge reserved.
  Chunk* new_fused_chunk(std::string_view key, uint64_t hash, uint32_t len, uint32_t charge);
  // What a chunk of `len` bytes costs the budget (policy overhead aside).
  size_t chunk_charge(uint32_t len) const;
  const uint32_t shard_bits_;
  std::atomic<double> lease_max_fraction_;
  std::unique_ptr<Shard[]> shards_;
  const size_t shard_count_;
  std::atomic<int64_t> used_{0};
  std::atomic<int64_t> budget_;
  std::atomic<int64_t> leased_{0};
  std::atomic<uint64_t> next_version_{1};
  std::shared_ptr<AbsentWatches> absent_watches_ = std::make_shared<AbsentWatches>();
  std::atomic<uint64_t> expired_objects_{0};
  std::atomic<uint64_t> lease_refused_{0}, lease_expired_unread_{0};
  std::atomic<uint64_t> prefetch_reads_{0}, prefetch_wasted_{0};
  std::atomic<double> use_once_max_fraction_{0.25};
  std::atomic<int64_t> use_once_bytes_{0};
  std::atomic<uint64_t> use_once_dropped_{0};

  LowerTier* lower_ = nullptr;
  std::atomic<int64_t> offloading_bytes_{0};
  std::atomic<int64_t> clean_objects_{0};
  // Every change of an indexed object's flash_state goes through here.
  void set_flash_state(Object* obj, FlashState state);
  // The counters kept per flash state (dirty bytes, clean objects,
  // offloading bytes): sign +1 as obj enters `state` or the index in it,
  // -1 as it leaves.
  void count_flash_state(const Object* obj, FlashState state, int sign);
  std::atomic<int64_t> dirty_bytes_{0};
  std::atomic<size_t> writeback_cursor_{0};
  void take_cold_dirty_locked(Shard& s, int64_t max_bytes, size_t max_steps, int64_t now_ms,
                              std::vector<OffloadItem>& out, int64_t& taken);
  // The object leaves memory when its copy lands (kOffloading), and no
  // policy picks it meanwhile: an offload, or an eviction that chose an
  // object whose copy is under way (rather than pass over the coldest data).
  void leave_when_copied_locked(Shard& s, Object* obj);
  // That copy failed: the object stays, dirty, as the newest entry.
  void keep_after_failed_copy_locked(Shard& s, Object* obj);
  // An object eviction took out of every list stays after all: its chunks go
  // back to the policy, or to the use-once lane they came from. kColdest
  // keeps it the next victim (the lower tier was only busy); kNewest gives it
  // a full round first (its write failed).
  enum class Relink : uint8_t { kColdest, kNewest };
  void relink_victim_locked(Shard& s, Object* obj, Relink where);
  Evictor evictor_;

  std::atomic<int64_t> freed_since_trim_{0};
  // Asks the background thread to return freed memory once evictions freed
  // a quarter of the budget: fast writers outrun a once-a-second trim.
  void note_freed(int64_t bytes);
  // Last member: its thread works on everything above, and stops first.
  ActiveExpiry expiry_{
      ActiveExpiry::Work{.expire_cycle = [this](int64_t now_ms) { expire_cycle(now_ms); },
                         .return_free_memory = [this] { return_free_memory(); },
                         .release_idle_buffers =
                             [this] {
                               buffer_pool_.release_idle();
                               middling_pool_.release_idle();
                             }}};
};

}  // namespace tierkv::memory
