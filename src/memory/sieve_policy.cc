// SIEVE (Zhang et al., NSDI'24): a FIFO with a visited bit and a hand that
// moves from old to new without moving survivors. Survivors keep their place,
// so new entries that are never hit again are the ones the hand meets first.
#include <algorithm>

#include "memory/hook_list.h"
#include "memory/policies.h"

namespace tierkv::memory {
namespace {

class SievePolicy final : public EvictionPolicy {
 public:
  void insert(PolicyHook* h) override {
    h->freq = 0;
    list_.push_front(h);
  }
  void touch(PolicyHook* h) override { h->freq = 1; }
  void remove(PolicyHook* h) override {
    if (hand_ == h) hand_ = list_.newer(h);
    leave(h);
    list_.unlink(h);
    cold_left_ = std::min(cold_left_, list_.size());
  }
  size_t entries() const override { return list_.size(); }
  // Just older than the hand, which then starts on it.
  void reinstate(PolicyHook* h) override {
    h->freq = 0;
    if (hand_ == nullptr) {
      list_.push_back(h);
      return;
    }
    list_.insert_after(hand_, h);
    hand_ = h;
  }

  PolicyHook* evict(Evictable evictable) override {
    for (size_t steps = 2 * list_.size() + 1; steps > 0 && !list_.empty(); --steps) {
      PolicyHook* h = hand_ ? hand_ : list_.back();
      hand_ = list_.newer(h);
      // The writeback hand stays ahead of (or on) the eviction hand.
      if (h == cold_) step_cold();
      if (h->freq) {
        h->freq = 0;
      } else if (evictable(h)) {
        list_.unlink(h);
        if (list_.empty()) cold_ = nullptr;
        cold_left_ = std::min(cold_left_, list_.size());
        return h;
      }
    }
    return nullptr;
  }

  // From the eviction hand toward the head, then from the tail: the order
  // the hand sweeps in.
  PolicyHook* next_cold() override {
    if (!walking_) {
      if (list_.empty()) return nullptr;
      cold_ = hand_ ? hand_ : list_.back();
      cold_left_ = list_.size();
      walking_ = true;
    }
    if (cold_ == nullptr || cold_left_ == 0) {
      walking_ = false;
      cold_ = nullptr;
      return nullptr;
    }
    PolicyHook* h = cold_;
    step_cold();
    return h;
  }

 private:
  PolicyHook* wrap(PolicyHook* h) {
    PolicyHook* n = list_.newer(h);
    return n ? n : list_.back();
  }
  void step_cold() {
    cold_ = wrap(cold_);
    if (cold_left_ > 0) --cold_left_;
  }
  // h is about to go: the writeback hand steps past it first.
  void leave(PolicyHook* h) {
    if (h != cold_) return;
    step_cold();                      // h counts as visited: it is gone
    if (cold_ == h) cold_ = nullptr;  // h was the only entry
  }

  HookList list_;
  PolicyHook* hand_ = nullptr;
  PolicyHook* cold_ = nullptr;  // writeback hand; meaningful while walking_
  size_t cold_left_ = 0;        // entries the walk has still to visit
  bool walking_ = false;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_sieve_policy() {
  return std::make_unique<SievePolicy>();
}

}  // namespace tierkv::memory
