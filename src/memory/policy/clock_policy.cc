// CLOCK: one reference bit per entry and a hand sweeping a circular list.
// Hits only set a bit, so a hit costs no list surgery.
#include "memory/hook_list.h"
#include "memory/policy/policies.h"
#include "memory/policy/writeback_hand.h"

namespace tierkv::memory {
namespace {

class ClockPolicy final : public EvictionPolicy {
 public:
  void insert(PolicyHook* h) override {
    h->freq = 0;
    // New entries go just behind the hand: the hand sweeps toward newer
    // entries, so the slot just older than it is the last place it looks.
    if (hand_ == nullptr)
      list_.push_front(h);
    else
      list_.insert_after(hand_, h);
  }
  void touch(PolicyHook* h) override { h->freq = 1; }
  void remove(PolicyHook* h) override {
    if (hand_ == h) hand_ = cold_.after(h);
    cold_.leave(h);
    list_.unlink(h);
    if (list_.empty()) hand_ = nullptr;
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
    if (list_.empty()) return nullptr;
    if (hand_ == nullptr) hand_ = list_.back();
    // Two sweeps clear every bit; a third finds nothing new.
    for (size_t steps = 2 * list_.size() + 1; steps > 0; --steps) {
      PolicyHook* h = hand_;
      hand_ = cold_.after(h);  // from the old end toward the new, wrapping
      cold_.passed(h);
      if (h->freq) {
        h->freq = 0;
      } else if (evictable(h)) {
        list_.unlink(h);
        if (list_.empty()) hand_ = nullptr;
        cold_.left();
        return h;
      }
    }
    return nullptr;
  }

  // From the eviction hand once around the circle: the order it sweeps in.
  PolicyHook* next_cold() override { return cold_.next(hand_); }

 private:
  HookList list_;
  PolicyHook* hand_ = nullptr;
  WritebackHand cold_{list_};
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_clock_policy() {
  return std::make_unique<ClockPolicy>();
}

}  // namespace tierkv::memory
