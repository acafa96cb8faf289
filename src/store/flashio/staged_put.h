// StagedPut: a write that goes to flash chunk by chunk and becomes visible
// whole at commit(): preheat jobs, and values larger than memory.
//
// Pieces may come in any order, from several threads, each a whole number
// of chunks (the object's last chunk may be short). Until commit() readers
// see the previous version of the key, or nothing; a StagedPut dropped
// without commit() leaves no trace a reader or a restart can see (see
// FlashTier::StagedObject). With cache_in_memory the same bytes also fill a
// memory copy, installed as an ordinary clean, evictable object at commit:
// one pass over the data, no read back. If memory cannot hold the object
// the copy is skipped and the object lives on flash alone.
//
// write() and commit() block (on flash's write queue, on the last chunk's
// landing): call them from a worker, never a network thread.
#pragma once

#include <absl/functional/function_ref.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/mutex.h"
#include "core/status.h"
#include "flash/flash_tier.h"
#include "memory/memory_tier.h"
#include "store/exclusive_runner.h"
#include "store/key_locks.h"

namespace tierkv {

struct StagedPutOptions {
  int64_t expire_at_ms = 0;      // unix ms; 0: none
  bool cache_in_memory = false;  // also fill a memory copy (best effort)
  // The most the memory copy may take: past it (or past the room memory
  // finds) the copy holds the object's first chunks and the rest is read
  // from flash. 0: no cap.
  int64_t memory_cap_bytes = 0;
};

class StagedPut {
 public:
  StagedPut(flash::FlashTier::StagedObject object, memory::MemoryTier& memory, KeyLocks& locks,
            std::string key, uint64_t size, uint64_t version, const StagedPutOptions& options);
  ~StagedPut();
  StagedPut(const StagedPut&) = delete;
  StagedPut& operator=(const StagedPut&) = delete;

  const std::string& key() const { return key_; }
  uint64_t size() const { return size_; }
  uint64_t version() const { return version_; }
  // A later write or removal of the key replaced this one while it landed.
  bool superseded() const { return object_.superseded(); }
  uint32_t chunk_size() const { return chunk_size_; }
  // True while a memory copy is being filled.
  bool caching() const { return copy_.has_value(); }
  // Bytes of the object the memory copy holds (all of it, or its first
  // chunks).
  uint64_t cached_bytes() const { return cached_bytes_; }

  // Writes bytes [offset, offset + bytes.size()): offset on a chunk
  // boundary, the length whole chunks or up to the object's end. Busy if
  // flash's write queue stays full for a long time; the error of an earlier
  // chunk write, if one failed.
  Status write(uint64_t offset, std::string_view bytes);
  // The expiry the object gets at commit, if it was not known at the start
  // (a SET's options follow its value). Before commit().
  void set_expiry(int64_t expire_at_ms);
  // Once every byte was written: writes the last chunk, waits for it, then
  // makes the object the key's value (and installs the memory copy).
  // Conflict if the key was removed or written since the put began, or a
  // chunk was lost; the previous value stays then.
  // With `exclusive`, the last chunk is written, and waited for, inside it.
  Result<memory::WriteResult> commit(const ExclusiveRunner& exclusive = {});
  // commit() in three steps, for a caller that must hold other writers off
  // while the object becomes visible (FlashCopy): await_body() first, then
  // try_write_last(), which is Busy at once if flash's write queue is full,
  // and await_last().
  Status await_body();
  Status try_write_last();
  Result<memory::WriteResult> await_last();
  // Runs `last_step` inside `exclusive` (directly if it is empty) until it
  // returns false; true means try_write_last() found flash's write queue
  // full, so the exclusion is given back and the step runs again later.
  // Busy if the queue stays full for a long time.
  static Status run_exclusive(const ExclusiveRunner& exclusive,
                              absl::FunctionRef<bool()> last_step);

 private:
  struct Landing;
  Status queue_chunk(uint32_t index, std::string_view data);
  Status try_queue_chunk(uint32_t index, std::string_view data);
  Status wait_for_landing(uint32_t chunks);
  Status publish_locked();

  flash::FlashTier::StagedObject object_;
  memory::MemoryTier& memory_;
  KeyLocks& locks_;
  const std::string key_;
  const uint64_t size_;
  const uint64_t version_;
  const uint32_t chunk_size_;
  const uint32_t chunk_count_;
  StagedPutOptions options_;
  uint64_t cached_bytes_ = 0;
  std::optional<memory::ObjectWriter> copy_;
  std::shared_ptr<Landing> landing_;
  Mutex last_mu_;
  std::string last_chunk_ ABSL_GUARDED_BY(last_mu_);  // held back: its write is the commit
  bool have_last_ ABSL_GUARDED_BY(last_mu_) = false;
};

}  // namespace tierkv
