// DeadlineTable: when each of a shard's items stops being something, for
// the few items that have such an end: the leased chunks (LeaseTable) and
// the objects with a TTL (TtlTable, Redis's expires dict). Kept beside the
// items rather than in them: two fields in every chunk or object header
// cost each small key 16 bytes. An entry is found by its item, and entries
// are sampled in turn by a cursor (active expiry, lease sweeps).
// Not thread safe: the shard's lock guards it.
#pragma once

#include <absl/container/flat_hash_map.h>
#include <absl/container/inlined_vector.h>

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>

namespace tierkv::memory {

// Bytes a flat_hash table of this capacity occupies: one slot and one
// control byte per bucket, plus a group of cloned control bytes.
inline int64_t flat_table_bytes(size_t capacity, size_t slot_size) {
  if (capacity == 0) return 0;
  return static_cast<int64_t>(capacity * (slot_size + 1) + 16);
}

template <typename T>
class DeadlineTable {
 public:
  struct Entry {
    T* item;
    int64_t until_ms;
  };
  using Sample = absl::InlinedVector<Entry, 20>;

  // Starts item's entry, or moves its end if it has one.
  void set(T* item, int64_t until_ms) { until_[item] = until_ms; }
  // When item's entry ends; it must have one.
  int64_t until(const T* item) const {
    std::optional<int64_t> end = find(item);
    assert(end.has_value());
    return end.value_or(0);
  }
  std::optional<int64_t> find(const T* item) const {
    auto it = until_.find(item);
    if (it == until_.end()) return std::nullopt;
    return it->second;
  }
  // Ends item's entry, if it has one.
  void remove(const T* item) {
    auto it = until_.find(item);
    if (it == until_.end()) return;
    // The cursor moves on rather than start the next sample over.
    if (cursor_ == item) {
      auto next = std::next(it);
      cursor_ = next == until_.end() ? nullptr : next->first;
    }
    until_.erase(it);
  }
  void clear() {
    absl::flat_hash_map<const T*, int64_t>().swap(until_);
    cursor_ = nullptr;
  }
  bool empty() const { return until_.empty(); }
  size_t size() const { return until_.size(); }
  // Up to n entries (fewer only if the table holds fewer), each once,
  // taken in table order from where the last sample stopped: over repeated
  // samples every entry comes up in turn, as Redis's expiry cursor does.
  // Callers may remove what they were given.
  Sample sample(size_t n) {
    Sample out;
    n = std::min(n, until_.size());
    auto it = cursor_ != nullptr ? until_.find(cursor_) : until_.end();
    if (it == until_.end()) it = until_.begin();
    while (out.size() < n) {
      out.push_back({const_cast<T*>(it->first), it->second});
      if (++it == until_.end()) it = until_.begin();
    }
    cursor_ = it == until_.end() ? nullptr : it->first;
    return out;
  }
  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (const auto& [item, until_ms] : until_) fn(item, until_ms);
  }

  // Heap bytes held now, and the most one more entry may add.
  int64_t bytes() const { return flat_table_bytes(until_.capacity(), kSlotSize); }
  int64_t growth_on_insert() const {
    const size_t cap = until_.capacity();
    if (until_.size() + 1 <= cap - cap / 8) return 0;
    return flat_table_bytes(cap * 2 + 1, kSlotSize) - flat_table_bytes(cap, kSlotSize);
  }

 private:
  static constexpr size_t kSlotSize = sizeof(std::pair<const T*, int64_t>);
  // One table, no list beside it: 16 bytes a slot. A list for random
  // sampling cost each entry another 16 and a slot index.
  absl::flat_hash_map<const T*, int64_t> until_;
  const T* cursor_ = nullptr;  // the next sample starts here
};

struct Chunk;
struct Object;
using LeaseTable = DeadlineTable<Chunk>;
using TtlTable = DeadlineTable<Object>;

}  // namespace tierkv::memory
