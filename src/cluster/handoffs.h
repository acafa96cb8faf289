// Handoffs: the slots this node has just handed to their new owner, so that
// it answers -ASK rather than -MOVED for them while that owner may not know
// yet.
//
// Why: nodes adopt a new map each through its own etcd watch. When a moving
// slot flips (its keys all moved), the source may take the new map before
// the target does. Its -MOVED would send the client to the target, whose
// older map still names the source as owner: -MOVED back, and the client
// gives up after its redirection limit. With -ASK, the client sends ASKING
// and the command, which the target serves under either map (the slot is
// moving to it in the old one, and its own in the new).
//
// A slot is handed off when the map served until now had it owned here and
// moving to a node, and the newer one has it owned by that node. The entry
// lasts `window` from the adoption: one lease TTL is enough, since by then
// the target has read a map written after the flip, or answers
// -CLUSTERDOWN (member.h). -ASK does not update a client's slot table,
// which is why the window is bounded; after it, -MOVED as usual.
//
// Thread-safe: note() runs on the map's watcher, handed_to() on I/O threads.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "cluster/slot_map.h"
#include "core/mutex.h"

namespace tierkv::cluster {

class Handoffs {
 public:
  explicit Handoffs(std::chrono::milliseconds window) : window_ms_(window.count()) {}

  // Records what `next` hands away from node `self_id`, given `old` (the map
  // served until now; null for the first), at `now_ms` (coarse_mono_ms()).
  void note(const SlotMap* old, const SlotMap& next, std::string_view self_id, int64_t now_ms);

  // Whether `slot` was handed to `owner_id` less than the window before
  // `now_ms`.
  bool handed_to(uint16_t slot, std::string_view owner_id, int64_t now_ms) const;

  // Whether any entry may still be live at `now_ms`: lets the caller skip
  // the lock (and the callback) in the common case.
  bool any(int64_t now_ms) const {
    return now_ms < latest_until_ms_.load(std::memory_order_acquire);
  }

 private:
  struct Entry {
    std::string target_id;
    int64_t until_ms = 0;
  };
  const int64_t window_ms_;
  mutable Mutex mu_;
  absl::flat_hash_map<uint16_t, Entry> by_slot_ ABSL_GUARDED_BY(mu_);  // at most kSlotCount
  std::atomic<int64_t> latest_until_ms_{0};
};

}  // namespace tierkv::cluster
