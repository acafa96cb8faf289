// SIEVE (Zhang et al., NSDI'24): a FIFO with a visited bit and a hand that
// moves from old to new without moving survivors. Survivors keep their place,
// so new entries that are never hit again are the ones the hand meets first.
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
    list_.unlink(h);
  }
  size_t entries() const override { return list_.size(); }

  PolicyHook* evict(Evictable evictable) override {
    for (size_t steps = 2 * list_.size() + 1; steps > 0 && !list_.empty(); --steps) {
      PolicyHook* h = hand_ ? hand_ : list_.back();
      hand_ = list_.newer(h);
      if (h->freq) {
        h->freq = 0;
      } else if (evictable(h)) {
        list_.unlink(h);
        return h;
      }
    }
    return nullptr;
  }

 private:
  HookList list_;
  PolicyHook* hand_ = nullptr;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_sieve_policy() {
  return std::make_unique<SievePolicy>();
}

}  // namespace tierkv::memory
