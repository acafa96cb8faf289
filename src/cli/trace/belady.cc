#include "cli/trace/belady.h"

#include <algorithm>
#include <queue>
#include <utility>
#include <vector>

namespace tierkv::trace {
namespace {

// Max-heap of (next use, id) over resident ids, with lazy deletion: a hit
// pushes a fresh entry and leaves the old one behind. An entry is live when
// its id is resident and its next use is the id's current one; next uses of
// different requests differ, so a stale entry can never look live (ids that
// are never used again are never inserted again either).
class FarthestFirst {
 public:
  FarthestFirst(size_t ids, size_t capacity) : next_of_(ids, kAbsent), capacity_(capacity) {
    heap_.reserve(2 * capacity + 64);
  }

  bool resident(uint32_t id) const { return next_of_[id] != kAbsent; }
  size_t size() const { return size_; }

  void set(uint32_t id, uint32_t next) {
    if (!resident(id)) ++size_;
    next_of_[id] = next;
    heap_.emplace_back(next, id);
    std::push_heap(heap_.begin(), heap_.end());
    if (heap_.size() > 4 * capacity_ + 64) compact();
  }

  // The live entry with the farthest next use. Requires size() > 0.
  std::pair<uint32_t, uint32_t> farthest() {
    while (!live(heap_.front())) {
      std::pop_heap(heap_.begin(), heap_.end());
      heap_.pop_back();
    }
    return heap_.front();
  }

  void erase_farthest() {
    auto [next, id] = farthest();
    std::pop_heap(heap_.begin(), heap_.end());
    heap_.pop_back();
    next_of_[id] = kAbsent;
    --size_;
  }

 private:
  static constexpr uint32_t kAbsent = UINT32_MAX;

  bool live(const std::pair<uint32_t, uint32_t>& e) const { return next_of_[e.second] == e.first; }

  void compact() {
    std::erase_if(heap_, [&](const auto& e) { return !live(e); });
    std::make_heap(heap_.begin(), heap_.end());
  }

  std::vector<uint32_t> next_of_;  // current next use per resident id
  std::vector<std::pair<uint32_t, uint32_t>> heap_;
  size_t size_ = 0;
  const size_t capacity_;
};

uint64_t simulate(const DenseTrace& trace, size_t capacity, bool bypass) {
  if (capacity == 0) return trace.requests();
  FarthestFirst cache(trace.unique(), capacity);
  uint64_t misses = 0;
  for (size_t i = 0; i < trace.requests(); ++i) {
    uint32_t id = trace.ids[i];
    uint32_t next = trace.next_use[i];
    if (cache.resident(id)) {
      cache.set(id, next);
      continue;
    }
    ++misses;
    if (cache.size() == capacity) {
      // With bypass, the newcomer competes with the residents for its slot.
      if (bypass && next >= cache.farthest().first) continue;
      cache.erase_farthest();
    }
    cache.set(id, next);
  }
  return misses;
}

}  // namespace

uint64_t belady_min_misses(const DenseTrace& trace, size_t capacity) {
  return simulate(trace, capacity, false);
}

uint64_t belady_opt_misses(const DenseTrace& trace, size_t capacity) {
  return simulate(trace, capacity, true);
}

}  // namespace tierkv::trace
