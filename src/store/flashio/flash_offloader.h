// FlashOffloader: the memory tier's lower tier, backed by the FlashTier.
//
// Evicted dirty objects (on_evict) and write-through copies are written as
// one batch of chunk records each. The item's pins keep the chunks in memory,
// and charged, until the batch lands; then the memory tier is told, which
// either drops the evicted object or marks the copy clean.
#pragma once

#include <atomic>
#include <functional>

#include "core/log_throttle.h"
#include "core/metrics.h"
#include "core/status.h"
#include "flash/flash_tier.h"
#include "memory/lower_tier.h"
#include "memory/memory_tier.h"

namespace tierkv {

class FlashOffloader final : public memory::LowerTier {
 public:
  FlashOffloader(flash::FlashTier& flash, memory::MemoryTier& memory, MetricsRegistry& metrics);

  bool holds(std::string_view key, uint64_t hash, uint64_t version, uint32_t chunk_count) override;
  memory::OffloadAnswer offload(memory::OffloadItem& item) override;
  void reconcile_expiry(std::string_view key, uint64_t version, int64_t expire_at_ms) override;
  // Writes a copy of a resident object (write-through, persist, shutdown).
  // `done` (may be empty) runs once it landed or failed. Busy if the flash
  // write queue is full: the object then stays dirty.
  Status write_copy(memory::OffloadItem&& item, std::function<void(Status)> done);
  // Runs after every batch that lands (on a flash I/O thread), so writes
  // refused as Busy can try again. Set once, before traffic.
  void set_on_landed(std::function<void()> fn) { on_landed_ = std::move(fn); }

 private:
  Status submit(memory::OffloadItem&& item, std::function<void(Status)> done);
  void log_write_error(std::string_view key, const Status& error);

  flash::FlashTier& flash_;
  memory::MemoryTier& memory_;
  Counter& write_errors_;
  Counter& busy_;
  std::function<void()> on_landed_;
  LogThrottle error_log_;
};

}  // namespace tierkv
