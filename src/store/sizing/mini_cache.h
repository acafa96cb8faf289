// MiniCache: a scaled-down model of the memory tier, or of memory in front
// of flash, fed the requests of a sample of the keys (SHARDS; see
// miss_ratio_curves.h). It holds no values: an entry is a key's sampled
// hash, its size and the eviction policy's hook, so the real policy's code
// (memory/policy) decides what a tier of this size would keep.
//
// The flash level, when it has one, is what the flash tier is to memory: a
// log (FIFO by bytes) that memory's evictions go to. A key read from it
// counts as a hit and moves back into memory, its flash copy staying until
// the log drops it; a write of the key makes that copy stale.
//
// Not thread-safe: its owner serializes calls.
#pragma once

#include <absl/container/flat_hash_map.h>
#include <absl/container/node_hash_map.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "memory/policy/eviction_policy.h"

namespace tierkv {

class MiniCache {
 public:
  // `flash_bytes` 0: memory alone.
  MiniCache(memory::PolicyKind policy, uint64_t memory_bytes, uint64_t flash_bytes);
  MiniCache(const MiniCache&) = delete;
  MiniCache& operator=(const MiniCache&) = delete;

  // A read of `id` (`bytes` large): true if either level holds it. A miss
  // then inserts it into memory, as the look-aside client's SET would: the
  // client fills only what the real cache missed, and a model smaller than
  // it must still take what it misses. `bytes` 0 (not known: the real
  // cache missed too) leaves the fill to the client's write.
  bool read(uint64_t id, uint32_t bytes);
  // A write of `id`: its flash copy is stale; memory holds the new value
  // (where it already held the key, in the same place in the policy's
  // order, so that a fill after the real cache's miss does not reset it).
  void write(uint64_t id, uint32_t bytes);
  void remove(uint64_t id);
  // Drops every entry whose id `keep` refuses (a lower sampling rate), and
  // sets new capacities, evicting down to them.
  template <typename Keep>
  void resample(Keep keep, uint64_t memory_bytes, uint64_t flash_bytes);

  // What the model holds, in entries: memory's, and every record of the
  // flash log, dead ones too (a key copied again and again leaves one per
  // copy, and each takes DRAM until the log drops it). Each live flash key
  // has a record, so this also covers the flash keys.
  size_t entries() const { return memory_.size() + log_.size(); }
  // The keys it holds now, in memory or live on flash.
  size_t keys() const { return memory_.size() + flash_.size(); }
  // It has dropped something for room: it is full at its size.
  bool filled() const { return filled_; }
  // DRAM this model takes per entry, about (node, hook, policy metadata).
  static size_t bytes_per_entry(memory::PolicyKind policy);

 private:
  struct FlashEntry {
    uint32_t bytes = 0;
    uint64_t serial = 0;  // which log record is the current copy
  };
  void insert_memory(uint64_t id, uint32_t bytes);
  void evict_memory();
  void append_flash(uint64_t id, uint32_t bytes);
  void trim_flash();
  void drop_memory(uint64_t id);

  std::unique_ptr<memory::EvictionPolicy> policy_;
  absl::node_hash_map<uint64_t, memory::PolicyHook> memory_;  // stable hook addresses
  uint64_t memory_capacity_;
  uint64_t memory_used_ = 0;
  // The flash log: records in write order; a record whose serial is not
  // its key's current one is dead (overwritten, removed, or copied again).
  struct LogRecord {
    uint64_t id;
    uint64_t serial;
    uint32_t bytes;
  };
  absl::flat_hash_map<uint64_t, FlashEntry> flash_;
  std::deque<LogRecord> log_;
  uint64_t flash_capacity_;
  uint64_t log_bytes_ = 0;
  uint64_t next_serial_ = 1;
  bool filled_ = false;
};

template <typename Keep>
void MiniCache::resample(Keep keep, uint64_t memory_bytes, uint64_t flash_bytes) {
  std::vector<uint64_t> gone;
  for (const auto& [id, hook] : memory_)
    if (!keep(id)) gone.push_back(id);
  for (uint64_t id : gone) drop_memory(id);
  absl::erase_if(flash_, [&](const auto& entry) { return !keep(entry.first); });
  std::erase_if(log_, [&](const LogRecord& r) { return !keep(r.id); });
  log_bytes_ = 0;
  for (const LogRecord& r : log_) log_bytes_ += r.bytes;
  memory_capacity_ = memory_bytes;
  flash_capacity_ = flash_bytes;
  while (memory_used_ > memory_capacity_ && !memory_.empty()) evict_memory();
  trim_flash();
}

}  // namespace tierkv
