// LRU: the reference point every other policy is measured against.
#include "memory/hook_list.h"
#include "memory/policies.h"

namespace tierkv::memory {
namespace {

class LruPolicy final : public EvictionPolicy {
 public:
  void insert(PolicyHook* h) override { list_.push_front(h); }
  void touch(PolicyHook* h) override { list_.move_to_front(h); }
  void remove(PolicyHook* h) override { list_.unlink(h); }
  size_t entries() const override { return list_.size(); }

  PolicyHook* evict(Evictable evictable) override {
    // Pinned entries at the tail are being read, so they are recently used:
    // moving them to the front is what LRU would do on access anyway.
    for (size_t n = list_.size(); n > 0; --n) {
      PolicyHook* h = list_.back();
      if (evictable(h)) {
        list_.unlink(h);
        return h;
      }
      list_.move_to_front(h);
    }
    return nullptr;
  }

 private:
  HookList list_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_lru_policy() {
  return std::make_unique<LruPolicy>();
}

}  // namespace tierkv::memory
