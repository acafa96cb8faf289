// RegionReclaimer: the thread that copies forward the read chunks of the
// oldest written regions before the writers reclaim them (hits-based
// reinsertion), so that no writer (often a network thread evicting to make
// room) waits for the device reads a copy needs. RegionManager owns it and
// says which region is next; what copying a region's chunks means to its
// records is the RegionCopier's (FlashTier's) business (without
// reinsertion, a round copies nothing and only lists the region's chunks).
//
// Why ahead, and not by reclaiming regions itself: a region freed ahead of
// need holds nothing, and on a small device the two it kept free were an
// eighth of the capacity, worth more hits than the copies won
// (bench/flash-reclaim). A region whose chunks were copied stays written
// and readable; the writer that needs it reclaims it, which reads nothing.
//
// Locking: the region table is guarded by the owner's write lock, which this
// thread holds except while the copier marks and reads (read_kept) and
// submits its writes (submit).
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

#include "core/mutex.h"

namespace tierkv::flash {

class RegionManager;

// The owner of a region's records. One round runs at a time, in the order:
// mark_kept, read_kept, append_kept, submit.
class RegionCopier {
 public:
  virtual ~RegionCopier() = default;
  // Write lock held: whether chunks may be copied now (not while the log is
  // being cleared).
  virtual bool may_copy() const = 0;
  // Write lock held: the round takes `region` (written, among the oldest);
  // the region stays written, and pinned until append_kept().
  virtual void mark_kept(uint32_t region) = 0;
  // No lock: marks and remembers the region's chunks the reinsertion policy
  // may keep (a walk of the index, too long to hold the write lock), and
  // reads them from the device.
  virtual void read_kept() = 0;
  // Write lock held: appends the copies still current, and unpins the region.
  virtual void append_kept() = 0;
  // No lock: submits what append_kept() appended.
  virtual void submit() = 0;
};

class RegionReclaimer {
 public:
  RegionReclaimer(Mutex& write_mu, RegionManager& regions, RegionCopier& copier);
  ~RegionReclaimer() { stop(); }
  RegionReclaimer(const RegionReclaimer&) = delete;
  RegionReclaimer& operator=(const RegionReclaimer&) = delete;

  void start();
  // Joins the thread; a round in progress finishes first. Idempotent.
  void stop() ABSL_LOCKS_EXCLUDED(write_mu_);
  void wake() { wake_.notify_one(); }
  // Waits (up to `timeout`) until no round is wanted or in progress; false on
  // timeout.
  bool wait_idle(std::chrono::milliseconds timeout) ABSL_LOCKS_EXCLUDED(write_mu_);

 private:
  void run() ABSL_LOCKS_EXCLUDED(write_mu_);
  bool wanted() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  bool busy() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
    return round_in_progress_ || wanted();
  }

  Mutex& write_mu_;
  RegionManager& regions_;
  RegionCopier& copier_;
  CondVar wake_;  // a region was taken: a round may be wanted
  CondVar idle_;  // it found nothing to do
  bool stop_ ABSL_GUARDED_BY(write_mu_) = false;
  // A round has taken its region (so next_to_copy() no longer names it) and
  // has not yet submitted its copies: a waiter must not see it as idle.
  bool round_in_progress_ ABSL_GUARDED_BY(write_mu_) = false;
  std::thread thread_;
};

}  // namespace tierkv::flash
