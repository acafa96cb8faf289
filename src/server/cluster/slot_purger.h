// SlotPurger: a node that gains a slot it held before must not serve the
// keys it kept from then: the slot's newer writes went to another node
// meanwhile. A gained slot starts empty, and gets its keys from the old
// owner (slot_migrator.h) or from clients. A slot being imported counts as
// gained: imports wait (-TRYAGAIN) until its old keys are gone.
//
// Member calls mark() with each new map before it serves it, so no command
// can see the new map before the gained slots are marked. Marked slots
// answer -TRYAGAIN (cluster clients retry it) while a background thread
// scans the key space through Store and removes their keys; then they
// serve. A node's first map marks only the slots it imports: what it holds
// of its own slots after a restart is what it had when it stopped.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/slot_map.h"
#include "store/store.h"

namespace tierkv::server {

class SlotPurger {
 public:
  SlotPurger(Store& store, std::string self_id);
  ~SlotPurger();
  SlotPurger(const SlotPurger&) = delete;
  SlotPurger& operator=(const SlotPurger&) = delete;

  // Marks the slots `next` gives this node (owned, or moving here) that
  // `old` did not; null `old`: the first map, whose slots moving here are
  // marked (owned ones keep what this node held when it stopped).
  void mark(const cluster::SlotMap* old, const cluster::SlotMap& next);
  // True while `slot`'s old keys are being removed.
  bool purging(uint16_t slot) const { return pending_[slot].load(std::memory_order_acquire) != 0; }
  uint64_t keys_purged() const { return keys_purged_.load(std::memory_order_relaxed); }

 private:
  void run(std::stop_token stop);
  // One pass over the key space, removing keys of slots marked before it began.
  void purge_pass(std::stop_token& stop, uint64_t generation);

  Store& store_;
  const std::string self_id_;
  // Per slot: the generation of the mark (0: not marked).
  std::vector<std::atomic<uint64_t>> pending_;
  std::mutex mu_;
  std::condition_variable_any wake_;
  uint64_t generation_ = 0;  // marks so far
  std::atomic<uint64_t> keys_purged_{0};
  std::jthread thread_;
};

}  // namespace tierkv::server
