// LowerTier: what the memory tier asks of the tier below it.
//
// The memory tier knows nothing of flash. When it must evict an object that
// exists nowhere else (dirty), it hands the object's pinned chunks to the
// lower tier instead of dropping them, and keeps the object readable in its
// index until the lower tier reports the write done
// (MemoryTier::finish_flash_write). The pinned chunks stay charged to the
// budget meanwhile, so a writer that outruns the lower tier waits for it
// (or fails with OutOfMemory): memory never grows past the budget.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memory/chunk.h"

namespace tierkv::memory {

// Where an object in memory stands with respect to the lower tier.
enum class FlashState : uint8_t {
  kDirty,       // exists only in memory
  kFlushing,    // a copy is being written (write-through); still cached
  kClean,       // the lower tier holds this very version
  kOffloading,  // evicted: being written, leaves memory when that lands
};

std::string_view flash_state_name(FlashState state);

// One object version to write to the lower tier. Owns pins on its chunks:
// they stay in memory (and charged) until the item is destroyed.
struct OffloadItem {
  std::string key;
  uint64_t hash = 0;
  uint64_t version = 0;
  uint64_t size = 0;
  int64_t expire_at_ms = 0;
  bool evicted = false;  // an offload (true) or a write-through copy (false)
  std::vector<ChunkPin> chunks;
};

enum class OffloadAnswer : uint8_t {
  kQueued,  // finish_flash_write() will follow
  kBusy,    // the lower tier's write queue is full: try again later
  kDrop,    // the lower tier cannot take it (failed, full): drop the object
};

class LowerTier {
 public:
  virtual ~LowerTier() = default;
  // Whether the lower tier still holds every chunk of this version. Called
  // with a memory shard lock held: answer from an index, never block, never
  // call back into the memory tier.
  virtual bool holds(std::string_view key, uint64_t hash, uint64_t version,
                     uint32_t chunk_count) = 0;
  // Takes the item on kQueued (moves from it); leaves it alone otherwise.
  // Called with no memory lock held; must not block.
  virtual OffloadAnswer offload(OffloadItem& item) = 0;
  // Memory's expiry of `version` is `expire_at_ms` (in the past if it has
  // just expired there), and the lower tier may hold, or be writing, a copy
  // with another: make the copy agree, or remove it. Called for objects that
  // expire in memory while not dirty, and when a copy lands whose expiry
  // changed while it was written. Called with the object's memory shard lock
  // held (so it is ordered with set_expiry): never block, never call back.
  virtual void reconcile_expiry(std::string_view key, uint64_t version, int64_t expire_at_ms) = 0;
};

}  // namespace tierkv::memory
