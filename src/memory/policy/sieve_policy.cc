// SIEVE (Zhang et al., NSDI'24): a FIFO with a visited bit and a hand that
// moves from old to new without moving survivors. Survivors keep their place,
// so new entries that are never hit again are the ones the hand meets first.
#include "memory/hook_list.h"
#include "memory/policy/policies.h"
#include "memory/policy/writeback_hand.h"

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
    cold_.leave(h);
    list_.unlink(h);
    cold_.left();
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
      cold_.passed(h);
      if (h->freq) {
        h->freq = 0;
      } else if (evictable(h)) {
        list_.unlink(h);
        cold_.left();
        return h;
      }
    }
    return nullptr;
  }

  // From the eviction hand toward the head, then from the tail: the order
  // the hand sweeps in.
  PolicyHook* next_cold() override { return cold_.next(hand_); }

 private:
  HookList list_;
  PolicyHook* hand_ = nullptr;
  WritebackHand cold_{list_};
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_sieve_policy() {
  return std::make_unique<SievePolicy>();
}

}  // namespace tierkv::memory
