// FlashReader: reads a byte range of a flash-resident object and hands it
// out in order.
//
// All the chunks of the range are issued at once (the flash tier bounds the
// device queue depth); they complete in any order, and each is passed on as
// soon as every chunk before it has been. Optionally the chunks are also
// copied into a memory-tier writer as they arrive (promotion without a
// second read).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "flash/flash_tier.h"
#include "memory/memory_tier.h"
#include "store/store.h"

namespace tierkv {

class FlashReader {
 public:
  // Receives the promotion writer back once the read ended: filled (OK) or not.
  using OnCopied = std::function<void(memory::ObjectWriter&&, Status)>;

  FlashReader(flash::FlashTier& flash, uint32_t chunk_size)
      : flash_(flash), chunk_size_(chunk_size) {}

  // Reads [offset, offset + length) of `info`'s version of `key` (range
  // already clipped to the object). With `copy`, the range must be the whole
  // object: every chunk is copied into it and it goes to `on_copied`.
  void start(std::string_view key, const flash::FlashObjectSummary& info, uint64_t offset,
             uint64_t length, FlashReadCallbacks callbacks,
             std::optional<memory::ObjectWriter> copy = std::nullopt, OnCopied on_copied = {});

  // Chunks an object of `size` bytes has (one for an empty object).
  uint32_t chunk_count(uint64_t size) const {
    return size == 0 ? 1 : static_cast<uint32_t>((size + chunk_size_ - 1) / chunk_size_);
  }
  uint32_t chunk_size() const { return chunk_size_; }

 private:
  struct Op;
  static void on_chunk(const std::shared_ptr<Op>& op, uint32_t index,
                       Result<flash::FlashChunk> chunk);

  flash::FlashTier& flash_;
  const uint32_t chunk_size_;
};

}  // namespace tierkv
