// SlotPurger: a node must never serve keys it kept of a slot from before a
// break in its hold on it: the slot's newer writes went to another node
// meanwhile. A slot this node holds (owns, or imports) is clean when it has
// held it without a break since the keys here were written; any other
// slot it gains starts empty, and gets its keys from the old owner
// (slot_migrator.h) or from clients.
//
// Member calls mark() with each new map before it serves it. A slot that
// `next` gives this node is marked unless it held it without a break since
// the map it served before (SlotMap::held_since() <= that map's version:
// this sees breaks in maps it never saw, e.g. while its lease was lost).
// Marked slots answer -TRYAGAIN (cluster clients retry it) while a
// background thread scans the key space through Store and removes their
// keys, waiting for the tombstones to land; then they serve.
//
// A slot that `next` no longer gives this node (while it names the node)
// is marked too, as Redis deletes the keys of a slot a newer map takes
// away: no one routes to them any more. A move leaves none: a slot flips
// only after its source has moved its keys (such a flip marks nothing),
// and the source of a move still owns the slot, so its keys stay for the
// move. What is left is what a node kept of slots given away while it was
// down or cut off. The scan
// starts once the store has loaded (after a restart, the keys on flash
// are in a scan only then).
//
// With `state_path`, the node keeps, in a small file beside its flash, the
// version of the last map it served and the slots still being purged
// (written durably before the map is served, and again after each purge).
// After a restart, kill -9 included, the first map is judged against that
// version: slots held since keep what flash kept, the others are purged,
// and so are the slots whose purge had not finished. Without the file (no
// flash, or a first start), every held slot of the first map is purged.
// A map written by hand, with no "since", falls back to the maps seen: a
// slot is kept if this node held it in the map before (in the first map:
// if it owns it).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cluster/slot_map.h"
#include "core/mutex.h"
#include "store/store.h"

namespace tierkv::server {

struct SlotPurgerOptions {
  std::string cluster_name;
  std::string self_id;
  std::string state_path;  // empty: nothing outlives the process (no flash)
};

class SlotPurger {
 public:
  SlotPurger(Store& store, SlotPurgerOptions options);
  ~SlotPurger();
  SlotPurger(const SlotPurger&) = delete;
  SlotPurger& operator=(const SlotPurger&) = delete;

  // Marks the slots `next` gives this node whose keys here may be stale;
  // `old` is the map served until now (null: the first since start).
  void mark(const cluster::SlotMap* old, const cluster::SlotMap& next);
  // True while `slot`'s old keys are being removed.
  bool purging(uint16_t slot) const { return pending_[slot].load(std::memory_order_acquire) != 0; }
  uint64_t keys_purged() const { return keys_purged_.load(std::memory_order_relaxed); }

 private:
  void run(std::stop_token stop);
  // One pass over the key space, removing keys of slots marked before it began.
  void purge_pass(std::stop_token& stop, uint64_t generation);
  // Whether `next` leaves this node's keys of `slot` as they are.
  bool clean(const cluster::SlotMap* old, const cluster::SlotMap& next, uint16_t slot,
             size_t self) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether this node may keep keys of `slot`, which `next` does not give
  // it; `self_old` is its index in `old`.
  bool may_hold_orphans(const cluster::SlotMap* old, std::optional<size_t> self_old,
                        const cluster::SlotMap& next, uint16_t slot) const;
  void load_state();
  void save_state();

  Store& store_;
  const SlotPurgerOptions options_;
  // Per slot: the generation of the mark (0: not marked).
  std::vector<std::atomic<uint64_t>> pending_;
  Mutex state_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // orders the state file's writes
  Mutex mu_;
  StopCondVar wake_;                              // a new mark, or stop
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // marks so far
  // The version of the map served before this process started (0: none
  // known); then of the last map marked.
  uint64_t base_version_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t served_version_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> keys_purged_{0};
  std::jthread thread_;
};

}  // namespace tierkv::server
