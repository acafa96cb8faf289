// FlashReader: reads a byte range of a flash-resident object as a window
// that the consumer drains, and hands the chunks out in order.
//
// A read is pulled, never pushed: at most `depth` chunks of it are held at
// once (issued, arrived or handed out and not yet released by the consumer)
// and at most `parallel` of them are being read. A piece's owner is the
// chunk's buffer; when the consumer drops it (the server: once the socket
// took the bytes) the next chunk is read. Every chunk buffer is charged to
// one process-wide BufferBudget (flash-read-buffer) before it is read; a read
// that finds no room waits, without blocking a thread, until buffers are
// released, in FIFO order; a read whose consumer drains it keeps one buffer
// for its next chunk, so stalled readers elsewhere cannot starve it.
// Optionally the chunks are also copied into a
// memory-tier writer as they arrive (promotion without a second read).
// Chunks that memory holds of an object held in part are handed out from
// there, in their turn, without a device read.
#pragma once

#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "core/metrics.h"
#include "flash/flash_tier.h"
#include "memory/memory_tier.h"
#include "store/flashio/buffer_budget.h"
#include "store/store.h"

namespace tierkv {

struct FlashReaderOptions {
  uint32_t chunk_size = 1 << 20;
  ReadWindow defaults{.depth = 4, .parallel = 4};
  int64_t buffer_limit = int64_t{256} << 20;
};

FlashReaderOptions flash_reader_options(const Config& config);

class FlashReader {
 public:
  // Receives the promotion writer back once the read ended: filled (OK) or not.
  using OnCopied = std::function<void(memory::ObjectWriter&&, Status)>;

  FlashReader(flash::FlashTier& flash, const FlashReaderOptions& options, MetricsRegistry& metrics);

  // Reads [offset, offset + length) of `info`'s version of `key` (range
  // already clipped to the object). With `copy`, the range must be the whole
  // object: every chunk is copied into it and it goes to `on_copied`.
  // `window` fields left 0 take the defaults. `resident` (from
  // MemoryTier::resident_chunks for this version, entry i for the range's
  // i-th chunk) are chunks memory holds: they are handed out in their turn
  // without a device read. The handle may be dropped: the read goes on as
  // long as the consumer releases pieces. A `background` read (a promotion
  // no reader waits for) yields the device queue to demand reads until a
  // reader follows it.
  std::shared_ptr<FlashRead> start(std::string_view key, const flash::FlashObjectSummary& info,
                                   uint64_t offset, uint64_t length, FlashReadCallbacks callbacks,
                                   ReadWindow window = {},
                                   std::optional<memory::ObjectWriter> copy = std::nullopt,
                                   OnCopied on_copied = {},
                                   std::vector<memory::ChunkPin> resident = {},
                                   std::optional<flash::FlashTier::VersionLocations> where = {},
                                   bool background = false);

  // A second consumer of `read` (from start(), with a copy): it is handed
  // [offset, offset + length) of the object from the chunks the read copies
  // into memory, those read already at once and the rest as they arrive, in
  // order, with no device read of its own. Its pieces pin memory chunks.
  // Null, and `callbacks` untouched, if the read fills no copy or has ended
  // (read it from flash then). Cancelling the handle ends only the follower.
  std::shared_ptr<FlashRead> follow(const std::shared_ptr<FlashRead>& read, uint64_t offset,
                                    uint64_t length, FlashReadCallbacks& callbacks);

  // Chunks an object of `size` bytes has (one for an empty object).
  uint32_t chunk_count(uint64_t size) const {
    return size == 0 ? 1 : static_cast<uint32_t>((size + chunk_size_ - 1) / chunk_size_);
  }
  uint32_t chunk_size() const { return chunk_size_; }

  // Run time settings (CONFIG SET); a read keeps the window it started with.
  void set_defaults(ReadWindow window);
  ReadWindow defaults() const;
  BufferBudget& budget() { return budget_; }
  const BufferBudget& budget() const { return budget_; }

 private:
  class Op;

  flash::FlashTier& flash_;
  const uint32_t chunk_size_;
  std::atomic<uint32_t> default_depth_;
  std::atomic<uint32_t> default_parallel_;
  BufferBudget budget_;
  Counter& bytes_copied_;
  Counter& bytes_adopted_;
};

}  // namespace tierkv
