// LRU: the reference point every other policy is measured against.
#include "memory/hook_list.h"
#include "memory/policy/policies.h"

namespace tierkv::memory {
namespace {

class LruPolicy final : public EvictionPolicy {
 public:
  void insert(PolicyHook* h) override { list_.push_front(h); }
  void touch(PolicyHook* h) override {
    leave(h);
    list_.move_to_front(h);
  }
  void remove(PolicyHook* h) override {
    leave(h);
    list_.unlink(h);
  }
  size_t entries() const override { return list_.size(); }
  void reinstate(PolicyHook* h) override { list_.push_back(h); }

  PolicyHook* evict(Evictable evictable) override {
    // Pinned entries at the tail are being read, so they are recently used:
    // moving them to the front is what LRU would do on access anyway.
    for (size_t n = list_.size(); n > 0; --n) {
      PolicyHook* h = list_.back();
      leave(h);
      if (evictable(h)) {
        list_.unlink(h);
        return h;
      }
      list_.move_to_front(h);
    }
    return nullptr;
  }

  // Least recently used first: from the tail toward the head.
  PolicyHook* next_cold() override {
    if (!walking_) {
      cold_ = list_.back();
      walking_ = true;
    }
    PolicyHook* h = cold_;
    if (h == nullptr) {
      walking_ = false;
      return nullptr;
    }
    cold_ = list_.newer(h);
    return h;
  }

 private:
  // h is about to move or go: the writeback hand steps past it first.
  void leave(PolicyHook* h) {
    if (h == cold_) cold_ = list_.newer(h);
  }

  HookList list_;
  PolicyHook* cold_ = nullptr;  // writeback hand; meaningful while walking_
  bool walking_ = false;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_lru_policy() {
  return std::make_unique<LruPolicy>();
}

}  // namespace tierkv::memory
