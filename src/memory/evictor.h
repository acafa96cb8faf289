// Evictor: makes room in MemoryTier's budget. The tier's only way to add
// bytes to its use is reserve(), which never passes the budget.
//
// To make room it takes victims round robin over the shards; in a shard,
// the use-once lane's oldest chunk first, then the policy's choice. A clean
// victim (the lower tier holds its version) leaves memory, one chunk at a
// time for an object of several chunks. A dirty victim is offloaded: handed
// to the lower tier, still readable here, gone when its copy lands
// (MemoryTier::finish_flash_write()). With a lower tier, offloads also run
// ahead, once use (less what is already on its way out) passes
// budget - budget/16, so writers usually find room freed by earlier
// landings instead of waiting for their own, like a dirty-page writeback
// threshold. Memory alone evicts only when it must.
//
// When nothing can leave yet (offloads in flight, pins of replies being
// sent), reserve() waits for landings up to offload-wait-ms, unless the
// thread is in a MemoryTier::NoWaitScope; memory alone fails at once. In a
// MemoryTier::CleanOnlyScope only clean victims go, and nothing is offloaded.
//
// It works under the tier's shard locks, one at a time, and holds none of
// its own but the mutex of the wait for landings.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/mutex.h"
#include "core/status.h"
#include "memory/chunk.h"
#include "memory/lower_tier.h"

namespace tierkv::memory {

class MemoryTier;
struct MemoryShard;
struct MemoryTierStats;
struct Object;

class Evictor {
 public:
  Evictor(MemoryTier& tier, int64_t offload_wait_ms);

  // Adds `bytes` to the tier's use, evicting (from `home_hash`'s shard
  // first when there is one shard) as needed. OutOfMemory, saying why, if
  // no room can be made in time.
  Status reserve(int64_t bytes, uint64_t home_hash);
  // As reserve(), but room comes only from use-once data, and it never waits.
  Status reserve_from_use_once(int64_t bytes);
  // Evicts until use <= budget (what is being offloaded aside); false if
  // only pinned or leased data is left.
  bool trim_to_budget();

  // The lower tier refused an offload: the object is a victim again (kBusy)
  // or dropped (kDrop).
  void abort_offload(const OffloadItem& item, OffloadAnswer answer);
  // A copy to the lower tier finished; `offload`: it was an offload.
  void copy_finished(bool offload);
  // Counts objects (and their chunks) that left memory for good.
  void count_evicted(uint64_t objects, uint64_t chunks) {
    evicted_objects_.fetch_add(objects, std::memory_order_relaxed);
    evicted_chunks_.fetch_add(chunks, std::memory_order_relaxed);
  }
  // Drops a whole object from its locked shard, counted as evicted.
  void evict_whole_locked(MemoryShard& s, Object* obj, ChunkList& to_release);
  void count_offload_dropped() { offload_dropped_.fetch_add(1, std::memory_order_relaxed); }
  void set_offload_wait_ms(int64_t ms) { offload_wait_ms_.store(ms); }

  // Its counters: evictions and offloads.
  void add_stats(MemoryTierStats& out) const;
  uint64_t offloads_inflight() const { return offloads_inflight_.load(); }

 private:
  enum class EvictResult : uint8_t { kFreed, kOffloadStarted, kBusy, kNothing };
  EvictResult evict_one(size_t first_shard);
  // Picks and takes out of the policy one victim chunk of a locked shard.
  Chunk* pick_victim_locked(MemoryShard& s, int64_t now_ms);
  // Starts offloading a dirty victim: fills `item`; the object stays indexed.
  void begin_offload_locked(MemoryShard& s, Object* obj, OffloadItem& item);
  void evict_chunk_locked(MemoryShard& s, Chunk* c, ChunkList& to_release);
  void wait_for_offloads(int64_t deadline_ms);

  MemoryTier& tier_;
  std::atomic<size_t> cursor_{0};
  std::atomic<uint64_t> evicted_objects_{0}, evicted_chunks_{0};
  std::atomic<uint64_t> offloads_inflight_{0};
  std::atomic<uint64_t> offloads_{0}, offload_busy_{0}, offload_dropped_{0}, offload_waits_{0};
  std::atomic<int64_t> offload_wait_ms_;
  Mutex landed_mu_;  // guards nothing: it only pairs with landed_cv_
  CondVar landed_cv_;
};

}  // namespace tierkv::memory
