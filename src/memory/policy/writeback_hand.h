// WritebackHand: the second hand of the circular policies (CLOCK, SIEVE),
// the one EvictionPolicy::next_cold() moves. It walks the list once around,
// from where the eviction hand stands toward newer entries (wrapping to the
// oldest), so writeback cleans entries in the order eviction will meet
// them. The policy tells it what the eviction hand passes and what leaves
// the list, so it never points at a removed entry and never lags behind
// the eviction hand.
#pragma once

#include <algorithm>
#include <cstddef>

#include "memory/hook_list.h"

namespace tierkv::memory {

class WritebackHand {
 public:
  explicit WritebackHand(HookList& list) : list_(list) {}

  // The next entry of the walk, starting at `eviction_hand` (null: the
  // oldest entry) if no walk is under way; null once around (the walk ends,
  // the next call starts another).
  PolicyHook* next(PolicyHook* eviction_hand) {
    if (!walking_) {
      if (list_.empty()) return nullptr;
      cold_ = eviction_hand ? eviction_hand : list_.back();
      left_ = list_.size();
      walking_ = true;
    }
    if (cold_ == nullptr || left_ == 0) {
      walking_ = false;
      cold_ = nullptr;
      return nullptr;
    }
    PolicyHook* h = cold_;
    step();
    return h;
  }
  // The eviction hand is on `h`: this hand stays ahead of (or on) it.
  void passed(PolicyHook* h) {
    if (h == cold_) step();
  }
  // `h` is about to be unlinked: this hand steps past it first.
  void leave(PolicyHook* h) {
    if (h != cold_) return;
    step();                           // h counts as visited: it is gone
    if (cold_ == h) cold_ = nullptr;  // h was the only entry
  }
  // An entry left the list (after unlinking it).
  void left() {
    if (list_.empty()) cold_ = nullptr;
    left_ = std::min(left_, list_.size());
  }
  // The entry after `h` going toward newer entries, wrapping to the oldest.
  PolicyHook* after(PolicyHook* h) {
    PolicyHook* n = list_.newer(h);
    return n ? n : list_.back();
  }

 private:
  void step() {
    cold_ = after(cold_);
    if (left_ > 0) --left_;
  }

  HookList& list_;
  PolicyHook* cold_ = nullptr;  // meaningful while walking_
  size_t left_ = 0;             // entries the walk has still to visit
  bool walking_ = false;
};

}  // namespace tierkv::memory
