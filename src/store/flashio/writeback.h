// Writeback: background cleaning of cold dirty memory.
//
// With offload-policy on_evict an object reaches flash only when it is
// evicted, so a full memory is full of dirty objects: making room costs a
// flash write, and a reservation that may not wait (a promotion, a
// prefetch) finds almost no room. This thread keeps the dirty bytes at or
// under dirty-max-fraction of the budget by copying the coldest dirty
// objects (eviction-policy order) to flash through the write-through path:
// each stays in memory and turns clean when its copy lands, so evicting it
// later frees memory at once and costs only a future flash read.
//
// Writers and evictions keep the flash write path. Writeback starts copies
// only while the flash write queue is at most half full, and its own bytes
// in flight stay under a quarter of that queue and budget/16 (they are
// pinned until they land, so they are memory no one can evict); one object
// larger than that may go when nothing else is in flight. It never blocks
// a writer: it takes each shard lock for a bounded walk and submits outside
// it, and a full queue simply leaves the object dirty for a later pass.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "core/metrics.h"
#include "core/mutex.h"
#include "core/status.h"
#include "flash/flash_tier.h"
#include "memory/memory_tier.h"
#include "store/flashio/flash_offloader.h"

namespace tierkv {

class Writeback {
 public:
  // Starts the thread. `dirty_max_fraction` >= 1 leaves it idle until set lower.
  Writeback(memory::MemoryTier& memory, flash::FlashTier& flash, FlashOffloader& offloader,
            MetricsRegistry& metrics, double dirty_max_fraction);
  // Stops the thread. Copies in flight still land (their callbacks use this
  // object): destroy it only after the flash tier has drained.
  ~Writeback();
  Writeback(const Writeback&) = delete;
  Writeback& operator=(const Writeback&) = delete;

  // CONFIG SET dirty-max-fraction: takes effect at once.
  void set_dirty_max_fraction(double fraction);
  // Starts no more copies (shutdown, before the final flush). Idempotent.
  void stop();
  int64_t inflight_bytes() const { return inflight_.value(); }
  uint64_t objects_written() const { return objects_.value(); }
  uint64_t bytes_written() const { return bytes_.value(); }

 private:
  // How often an idle thread looks at the dirty bytes: writers are never
  // slowed by a wake-up call, and 10 ms of writes over the mark is little.
  static constexpr int kPollMs = 10;
  // Policy entries one shard walk looks at under its lock.
  static constexpr size_t kStepsPerShard = 256;

  void run();
  // One batch of copies; false if there was nothing to do or no room.
  bool step();
  // Bytes writeback may start now (<= 0: none).
  int64_t room_bytes() const;
  // False if the flash queue refused it (the object stays dirty).
  bool submit(memory::OffloadItem&& item);
  void landed(int64_t bytes, const Status& result);

  memory::MemoryTier& memory_;
  flash::FlashTier& flash_;
  FlashOffloader& offloader_;
  Counter& objects_;
  Counter& bytes_;
  Gauge& inflight_;
  std::atomic<double> fraction_;
  Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;  // a copy landed or the fraction changed
  std::thread thread_;
};

}  // namespace tierkv
