// RegionReclaimer: the thread that keeps free regions ahead of the writers,
// so that no writer (often a network thread evicting to make room) waits for
// a reclaim that reads the device. RegionManager owns it and chooses the
// victims; what reclaiming a region means to the records in it is the
// RegionEvictor's (FlashTier's) business.
//
// Locking: the region table is guarded by the owner's write lock, which this
// thread holds except while the evictor reads the device (read_kept) and
// submits its writes (submit).
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

#include "core/mutex.h"

namespace tierkv::flash {

class RegionManager;

// The owner of a region's records. One eviction runs at a time, in the
// order: begin_eviction, read_kept, finish_eviction, submit.
class RegionEvictor {
 public:
  virtual ~RegionEvictor() = default;
  // Write lock held: whether regions may be reclaimed now (not while the
  // log is being cleared).
  virtual bool may_evict() const = 0;
  // Write lock held: `region`, just taken out of the written FIFO, leaves
  // the index; the chunks the reinsertion policy keeps are remembered.
  virtual void begin_eviction(uint32_t region) = 0;
  // No lock: reads the kept chunks from the device.
  virtual void read_kept() = 0;
  // Write lock held: appends the copies still current, and frees the region.
  virtual void finish_eviction() = 0;
  // No lock: submits what finish_eviction() appended.
  virtual void submit() = 0;
};

class RegionReclaimer {
 public:
  RegionReclaimer(Mutex& write_mu, RegionManager& regions, RegionEvictor& evictor);
  ~RegionReclaimer() { stop(); }
  RegionReclaimer(const RegionReclaimer&) = delete;
  RegionReclaimer& operator=(const RegionReclaimer&) = delete;

  void start();
  // Joins the thread; an eviction in progress finishes first. Idempotent.
  void stop() ABSL_LOCKS_EXCLUDED(write_mu_);
  void wake() { wake_.notify_one(); }
  // Waits (up to `timeout`) until no reclaim is wanted; false on timeout.
  bool wait_idle(std::chrono::milliseconds timeout) ABSL_LOCKS_EXCLUDED(write_mu_);

 private:
  void run() ABSL_LOCKS_EXCLUDED(write_mu_);
  bool wanted() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  Mutex& write_mu_;
  RegionManager& regions_;
  RegionEvictor& evictor_;
  CondVar wake_;  // a region was taken: one may be wanted
  CondVar idle_;  // it found nothing to do
  bool stop_ ABSL_GUARDED_BY(write_mu_) = false;
  std::thread thread_;
};

}  // namespace tierkv::flash
