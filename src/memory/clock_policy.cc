// CLOCK: one reference bit per entry and a hand sweeping a circular list.
// Hits only set a bit, so a hit costs no list surgery.
#include "memory/hook_list.h"
#include "memory/policies.h"

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
    if (hand_ == h) hand_ = advance(h);
    list_.unlink(h);
    if (list_.empty()) hand_ = nullptr;
  }
  size_t entries() const override { return list_.size(); }

  PolicyHook* evict(Evictable evictable) override {
    if (list_.empty()) return nullptr;
    if (hand_ == nullptr) hand_ = list_.back();
    // Two sweeps clear every bit; a third finds nothing new.
    for (size_t steps = 2 * list_.size() + 1; steps > 0; --steps) {
      PolicyHook* h = hand_;
      hand_ = advance(h);
      if (h->freq) {
        h->freq = 0;
      } else if (evictable(h)) {
        list_.unlink(h);
        if (list_.empty()) hand_ = nullptr;
        return h;
      }
    }
    return nullptr;
  }

 private:
  // The hand moves from the old end toward the new end, wrapping around.
  PolicyHook* advance(PolicyHook* h) {
    PolicyHook* n = list_.newer(h);
    return n ? n : list_.back();
  }

  HookList list_;
  PolicyHook* hand_ = nullptr;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_clock_policy() {
  return std::make_unique<ClockPolicy>();
}

}  // namespace tierkv::memory
