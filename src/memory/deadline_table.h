// DeadlineTable: when each of a shard's items stops being something, for
// the few items that have such an end: the leased chunks (LeaseTable) and
// the objects with a TTL (TtlTable, Redis's expires dict). Kept beside the
// items rather than in them: two fields in every chunk or object header
// cost each small key 16 bytes. An entry is found by its item, and entries
// can be sampled at random by position (active expiry, lease sweeps).
// Not thread safe: the shard's lock guards it.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

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

  // Starts item's entry, or moves its end if it has one.
  void set(T* item, int64_t until_ms) {
    auto [it, added] = slot_.try_emplace(item, static_cast<uint32_t>(entries_.size()));
    if (added) {
      entries_.push_back({item, until_ms});
    } else {
      entries_[it->second].until_ms = until_ms;
    }
  }
  // When item's entry ends; it must have one.
  int64_t until(const T* item) const {
    std::optional<int64_t> end = find(item);
    assert(end.has_value());
    return end.value_or(0);
  }
  std::optional<int64_t> find(const T* item) const {
    auto it = slot_.find(item);
    if (it == slot_.end()) return std::nullopt;
    return entries_[it->second].until_ms;
  }
  // Ends item's entry, if it has one.
  void remove(const T* item) {
    auto it = slot_.find(item);
    if (it == slot_.end()) return;
    const uint32_t slot = it->second;
    slot_.erase(it);
    if (slot + 1 != entries_.size()) {
      entries_[slot] = entries_.back();
      slot_[entries_[slot].item] = slot;
    }
    entries_.pop_back();
  }
  void clear() {
    std::vector<Entry>().swap(entries_);
    absl::flat_hash_map<const T*, uint32_t>().swap(slot_);
  }
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  // The i-th entry in no particular order (i < size()): for sampling.
  const Entry& at(size_t i) const { return entries_[i]; }

  // Heap bytes held now, and the most one more entry may add.
  int64_t bytes() const {
    return static_cast<int64_t>(entries_.capacity() * sizeof(Entry)) +
           flat_table_bytes(slot_.capacity(), kSlotSize);
  }
  int64_t growth_on_insert() const {
    int64_t growth = 0;
    if (entries_.size() == entries_.capacity())
      growth += static_cast<int64_t>(std::max<size_t>(entries_.capacity(), 1) * sizeof(Entry));
    const size_t cap = slot_.capacity();
    if (slot_.size() + 1 > cap - cap / 8)
      growth += flat_table_bytes(cap * 2 + 1, kSlotSize) - flat_table_bytes(cap, kSlotSize);
    return growth;
  }

 private:
  static constexpr size_t kSlotSize = sizeof(std::pair<const T*, uint32_t>);
  std::vector<Entry> entries_;
  absl::flat_hash_map<const T*, uint32_t> slot_;  // position in entries_
};

struct Chunk;
struct Object;
using LeaseTable = DeadlineTable<Chunk>;
using TtlTable = DeadlineTable<Object>;

}  // namespace tierkv::memory
