// S3-FIFO (Yang et al., SOSP'23): a small FIFO that filters one-hit wonders,
// a main FIFO with lazy reinsertion, and a ghost FIFO of recently filtered ids.
//
// Sizes are in bytes and relative: the small queue's share is 10% of what the
// policy holds, so the policy needs no capacity and works under the tier's
// shared budget. The ghost queue keeps at most as many ids as the policy
// holds entries; overhead_per_entry() charges that bound to the budget.
#include <absl/container/flat_hash_map.h>

#include <deque>

#include "memory/hook_list.h"
#include "memory/policy/policies.h"

namespace tierkv::memory {
namespace {

constexpr uint8_t kSmall = 0;
constexpr uint8_t kMain = 1;
constexpr uint8_t kMaxFreq = 3;
constexpr double kSmallShare = 0.10;

class GhostQueue {
 public:
  // Returns true, and forgets the id, if it was recently filtered.
  bool take(uint64_t id) { return seq_of_.erase(id) > 0; }

  void add(uint64_t id, size_t limit) {
    seq_of_[id] = next_seq_;
    fifo_.push_back({id, next_seq_++});
    trim(limit);
  }

  void trim(size_t limit) {
    // Entries taken by a hit stay in the FIFO as stale records; drop those
    // freely, and live ones only while over the limit.
    while (!fifo_.empty() && (seq_of_.size() > limit || fifo_.size() > 2 * limit + 64)) {
      auto [id, seq] = fifo_.front();
      fifo_.pop_front();
      auto it = seq_of_.find(id);
      if (it != seq_of_.end() && it->second == seq) seq_of_.erase(it);
    }
  }

 private:
  struct Record {
    uint64_t id;
    uint64_t seq;
  };
  std::deque<Record> fifo_;
  absl::flat_hash_map<uint64_t, uint64_t> seq_of_;
  uint64_t next_seq_ = 0;
};

class S3FifoPolicy final : public EvictionPolicy {
 public:
  void insert(PolicyHook* h) override {
    h->freq = 0;
    if (ghost_.take(h->id)) {
      h->queue = kMain;
      main_.push_front(h);
    } else {
      h->queue = kSmall;
      small_.push_front(h);
    }
  }
  void touch(PolicyHook* h) override {
    if (h->freq < kMaxFreq) ++h->freq;
  }
  void remove(PolicyHook* h) override {
    leave(h);
    queue_of(h).unlink(h);
  }
  size_t entries() const override { return small_.size() + main_.size(); }
  void reinstate(PolicyHook* h) override {
    h->freq = 0;
    if (h->queue == kSmall) ghost_.take(h->id);  // it never left
    queue_of(h).push_back(h);
  }
  // Ghost bytes per resident entry, worst case: a map slot (16 bytes + 1
  // control byte) at abseil's lowest load factor (7/16) is 39 bytes, plus up
  // to two 16-byte FIFO records (live and stale).
  size_t overhead_per_entry() const override { return 72; }

  PolicyHook* evict(Evictable evictable) override {
    // A queue whose every entry was found pinned or leased in this call is
    // "blocked": eviction falls back to the other queue instead of failing
    // while the other one still holds victims.
    Pass small{small_}, main{main_};
    for (size_t steps = 4 * entries() + 4; steps > 0; --steps) {
      bool use_small = small.open() && (small_over_share() || !main.open());
      if (!use_small && !main.open()) return nullptr;
      PolicyHook* victim = use_small ? step_small(evictable, small) : step_main(evictable, main);
      if (victim) return victim;
    }
    return nullptr;
  }

  // The small queue from its tail, then main from its tail: small's tail is
  // where entries seen once leave (the next victims while small is over its
  // share, as it is under a stream of writes); main's tail goes only when
  // small is under its share.
  PolicyHook* next_cold() override {
    if (!walking_) {
      cold_ = small_.empty() ? main_.back() : small_.back();
      walking_ = true;
    }
    PolicyHook* h = cold_;
    if (h == nullptr) {
      walking_ = false;
      return nullptr;
    }
    cold_ = colder_next(h);
    return h;
  }

 private:
  // The entry after h in the writeback walk.
  PolicyHook* colder_next(PolicyHook* h) {
    PolicyHook* n = queue_of(h).newer(h);
    if (n == nullptr && h->queue == kSmall) n = main_.back();
    return n;
  }
  // h is about to move or go (every evict() step moves the tail entry it
  // looks at): the writeback hand steps past it first, so it never falls
  // behind eviction.
  void leave(PolicyHook* h) {
    if (h == cold_) cold_ = colder_next(h);
  }

  // Unevictable entries seen in one queue during one evict() call.
  struct Pass {
    const HookList& list;
    size_t skipped = 0;
    bool open() const { return !list.empty() && skipped < list.size(); }
  };

  HookList& queue_of(PolicyHook* h) { return h->queue == kSmall ? small_ : main_; }

  bool small_over_share() const {
    if (small_.empty()) return false;
    if (main_.empty()) return true;
    double total = static_cast<double>(small_.bytes() + main_.bytes());
    return static_cast<double>(small_.bytes()) >= kSmallShare * total;
  }

  // The ghost remembers as many ids as the policy holds entries (the paper
  // sizes it like main, which is 90% of the cache); overhead_per_entry()
  // charges that bound.
  size_t ghost_limit() const { return entries(); }

  // One step at the small queue's tail: promote a re-referenced entry to
  // main, or evict it and remember its id in the ghost queue.
  PolicyHook* step_small(Evictable evictable, Pass& pass) {
    PolicyHook* h = small_.back();
    leave(h);
    small_.unlink(h);
    if (h->freq > 0) {
      h->freq = 0;
      h->queue = kMain;
      main_.push_front(h);
      return nullptr;
    }
    if (!evictable(h)) {
      small_.push_front(h);
      ++pass.skipped;
      return nullptr;
    }
    ghost_.add(h->id, ghost_limit());
    return h;
  }

  // One step at main's tail: reinsert entries with credit, else evict.
  PolicyHook* step_main(Evictable evictable, Pass& pass) {
    PolicyHook* h = main_.back();
    leave(h);
    if (h->freq > 0) {
      --h->freq;
      main_.move_to_front(h);
      return nullptr;
    }
    if (!evictable(h)) {
      main_.move_to_front(h);
      ++pass.skipped;
      return nullptr;
    }
    main_.unlink(h);
    ghost_.trim(ghost_limit());
    return h;
  }

  HookList small_;
  HookList main_;
  GhostQueue ghost_;
  PolicyHook* cold_ = nullptr;  // writeback hand; meaningful while walking_
  bool walking_ = false;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_s3fifo_policy() {
  return std::make_unique<S3FifoPolicy>();
}

}  // namespace tierkv::memory
