// RegionManager: which of the flash log's regions are free, written or
// draining, how full each is, and which reads pin them; which region is
// reclaimed next, the thread that copies read chunks forward ahead of the
// writers (RegionReclaimer), the reinsertion policy it applies, and the
// region table as a snapshot keeps it.
//
// A region is free (in the free pool), written (it holds records; written
// regions form a FIFO, and the oldest is reclaimed first), or draining
// (reclaimed while reads pinned it: its records stay readable until the last
// pin goes, and that unpin returns it to the free pool).
//
// Locking, the contract: the region table, the free pool, the FIFO and the
// byte counts are guarded by the owner's write lock (FlashTier's write_mu),
// which callers of every method not marked otherwise hold. Pins have a mutex
// of their own (pin_mutex()), nested inside the write lock, because
// reads pin and unpin without the write lock. Lock order: write lock, pins,
// then the index's shard locks.
#pragma once

#include <absl/container/inlined_vector.h>
#include <absl/functional/function_ref.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/metrics.h"
#include "core/mutex.h"

namespace tierkv::flash {

class RegionCopier;
class RegionReclaimer;
class ReinsertionPolicy;

struct RegionState {
  uint64_t seq = 0;             // 0: free
  uint64_t fill = 0;            // bytes written (header included)
  uint32_t pending_writes = 0;  // batches for this region not yet landed
  // Batches after the header batch wait until it has landed (and been
  // fsynced with fsync=always): a record acknowledged in a region whose
  // header is not on the device would not be found by recovery.
  bool header_landed = false;
  bool header_failed = false;
};

class RegionManager {
 public:
  // `draining` follows the number of draining regions.
  explicit RegionManager(Gauge& draining);
  ~RegionManager();

  // Sizes the table for `count` regions, none written or pinned, and the
  // free pool empty: recovery restores what is written, then finish_restore().
  void reset(uint32_t count);
  // Recovery: region `r` holds records (seq, fill), newer than the regions
  // restored before it.
  void restore_written(uint32_t r, uint64_t seq, uint64_t fill);
  // Recovery: every region not restored as written is free.
  void finish_restore();
  // clear(): every region is free and none drains. Pins held stay counted:
  // their readers drop them later, and a read of a wiped region misses.
  void free_all();

  uint32_t count() const { return static_cast<uint32_t>(states_.size()); }
  RegionState& state(uint32_t r) { return states_[r]; }
  const RegionState& state(uint32_t r) const { return states_[r]; }

  std::optional<uint32_t> take_free();
  size_t free_count() const { return free_.size(); }

  // Region `r` (just taken) starts a new incarnation numbered `seq`, the
  // newest written region.
  void start_written(uint32_t r, uint64_t seq);
  void add_fill(uint32_t r, uint64_t bytes);
  // Oldest first.
  const std::deque<uint32_t>& written() const { return fifo_; }
  // The region reclaimed next: the oldest written one, once its writes
  // have landed (FIFO: every region lives as long; reinsertion keeps what
  // is read). take_victim() takes it out of the FIFO.
  std::optional<uint32_t> next_victim() const;
  uint32_t take_victim();
  // The region whose read chunks the reclaimer copies forward next: once
  // fewer regions are free than it works ahead, the oldest written region
  // not yet copied from, among the oldest few, never the newest (the log
  // fills it), and once its writes have landed. mark_copied() records the
  // round.
  std::optional<uint32_t> next_to_copy() const;
  void mark_copied(uint32_t r) { copied_seq_ = std::max(copied_seq_, states_[r].seq); }
  // Region `r`, out of the FIFO, no longer counts as holding data.
  void empty(uint32_t r);
  uint64_t used_bytes() const { return used_bytes_; }

  // Pins. Their lock makes an index lookup and the pins it leads to one
  // step, against a reclaim that drops the region's entries under it.
  Mutex& pin_mutex() const ABSL_LOCK_RETURNED(pin_mu_) { return pin_mu_; }
  void pin_locked(uint32_t r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pin_mu_) { ++readers_[r]; }
  // Reclaimed while pinned, and still pinned.
  bool draining_locked(uint32_t r) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(pin_mu_) {
    return draining_[r];
  }
  struct ReclaimPins {
    bool read_by_others = false;  // pinned by reads when reclaimed
    bool writable = false;        // no pin at all: reusable at once
  };
  // Region `r` is being reclaimed; pinned, it drains. With `self_pin` the
  // reclaimer keeps a pin of its own (it reads the region).
  ReclaimPins reclaim_locked(uint32_t r, bool self_pin) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pin_mu_);
  // Without the write lock: drops pins, except each last pin of a draining
  // region. Those are returned, for unpin_last() under the write lock.
  absl::InlinedVector<uint32_t, 4> unpin(std::span<const uint32_t> regions)
      ABSL_LOCKS_EXCLUDED(pin_mu_);
  // Write lock held: drops one pin; a draining region left without pins is free.
  void unpin_last(uint32_t r) ABSL_LOCKS_EXCLUDED(pin_mu_);
  uint64_t draining_count() const;

  // The reclaimer thread, under the owner's write lock `write_mu`, copying
  // through `copier` with `policy` (null: no reinsertion); until
  // stop_reclaimer() (the copier must outlive it). Writers reclaim regions
  // themselves, with or without it.
  void start_reclaimer(Mutex& write_mu, RegionCopier& copier,
                       std::unique_ptr<ReinsertionPolicy> policy);
  void stop_reclaimer();
  void wake_reclaimer();
  // Waits until the reclaimer has caught up with the writers (true at once
  // without one); false after `timeout`.
  bool wait_for_reclaimer(std::chrono::milliseconds timeout);
  // The reclaimer's policy; null without a reclaimer or reinsertion. Its
  // thread's only.
  ReinsertionPolicy* reinsertion() { return reinsertion_.get(); }

  // The table as a snapshot keeps it: (seq, fill) of each region, then the
  // written regions oldest first (written().size() of them). False if
  // `put` refused a piece.
  bool persist(absl::FunctionRef<bool(const void*, size_t)> put) const;
  // Restores a table persist() wrote with `written` regions in its FIFO
  // (onto a reset() table); null, or what is wrong with it. finish_restore()
  // follows, as after recovery.
  const char* restore(absl::FunctionRef<bool(void*, size_t)> get, uint32_t written,
                      uint64_t region_size);

 private:
  std::vector<RegionState> states_;
  std::deque<uint32_t> free_;
  std::deque<uint32_t> fifo_;
  uint64_t used_bytes_ = 0;
  uint64_t copied_seq_ = 0;  // the newest region incarnation copied from

  mutable Mutex pin_mu_;
  std::vector<uint32_t> readers_ ABSL_GUARDED_BY(pin_mu_);
  // Reclaimed while pinned: out of the index, not yet free.
  std::vector<bool> draining_ ABSL_GUARDED_BY(pin_mu_);
  uint64_t draining_count_ ABSL_GUARDED_BY(pin_mu_) = 0;
  Gauge& draining_gauge_;

  std::unique_ptr<ReinsertionPolicy> reinsertion_;
  std::unique_ptr<RegionReclaimer> reclaimer_;  // last: stopped first
};

}  // namespace tierkv::flash
