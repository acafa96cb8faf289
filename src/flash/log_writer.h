// LogWriter: the write side of the flash log. It appends records to the
// active region through a batch buffer, seals full batches, and sends them
// to the device in order, at most `max_write_inflight` at a time. When a
// write slot frees, whatever has gathered in the active batch goes down with
// it: group commit, without a timer.
//
// Its invariants:
// * A region's header batch lands before any other batch of that region is
//   sent: a record acknowledged in a region whose header is not on the
//   device would not be found by recovery. If the header fails, the rest of
//   the region fails with it, and the next record opens another region.
// * With fsync=always a batch counts as landed only once fsynced.
// * Every batch completes through the owner's `Landed` handler, on an I/O
//   thread, never inside the caller's locks.
//
// It does not choose regions (the owner takes one from RegionManager or
// reclaims one, then calls start_region()), nor index what lands (the
// owner's handler does, then calls release_landed() and
// finish_callbacks()).
//
// Locking: as RegionManager's, every method but submit() needs the owner's
// write lock (FlashTier's write_mu).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/mutex.h"
#include "core/status.h"
#include "flash/io_engine.h"
#include "flash/region_manager.h"

namespace tierkv::flash {

struct StagingEntry;

// One record on its way to the device, and what its landing must do.
struct PendingChunk {
  std::string key;
  uint64_t key_hash = 0;
  uint32_t chunk_index = 0;
  uint64_t version = 0;
  uint64_t object_size = 0;
  uint32_t chunk_count = 0;
  uint64_t location = 0;      // where it is being written
  uint64_t old_location = 0;  // reinsertion only: where it came from
  uint64_t data_bytes = 0;
  int64_t expire_at_ms = 0;
  uint64_t generation = 0;    // the owner's clear() generation when accepted
  uint16_t record_flags = 0;  // kRecordTombstone, kRecordExpiry: nothing to index
  bool reinsertion = false;
  bool lazy = false;                      // RemoveOptions::lazy
  std::shared_ptr<StagingEntry> staging;  // a chunk of a staged object
  std::function<void(Status)> done;
};

class LogWriter;

// One buffer write: consecutive records of one region.
struct WriteBatch final : IoRequest {
  void on_complete(int64_t result) override;

  LogWriter* writer = nullptr;
  AlignedBuffer buffer;
  // Bytes the batch may fill: at most the region's room after
  // region_offset, so a buffer larger than that is only partly used.
  uint64_t capacity = 0;
  uint64_t used = 0;  // bytes filled (a whole number of blocks once sealed)
  uint32_t region = 0;
  uint64_t region_offset = 0;  // where buffer[0] lands inside the region
  bool fsynced = false;
  // Its region's header failed to land: completes with an error, unwritten.
  bool doomed = false;
  bool carries_header() const { return region_offset == 0; }
  std::vector<PendingChunk> chunks;
};

class LogWriter {
 public:
  struct Options {
    uint64_t region_size = 0;
    uint64_t write_buffer_size = 0;
    uint32_t max_write_inflight = 0;
    bool fsync_always = false;
  };
  // Runs for each batch that landed or failed (`result`: bytes or -errno).
  // The handler owns the batch from then on.
  using Landed = std::function<void(WriteBatch* batch, int64_t result)>;

  LogWriter(const Options& options, RegionManager& regions);

  // Before the first append: the engine batches go to, the salt records
  // carry, the device's write alignment (a power of two, 512 to 4096: a
  // batch ends padded to it, and the next starts there), and the landing
  // handler.
  void start(IoEngine& engine, uint64_t salt, uint32_t write_alignment, Landed landed);

  // True if a record of `bytes` fits in the active region.
  bool has_room(uint64_t bytes) const;
  // Opens region `r` (taken by the owner) as the active one, incarnation
  // `seq`, and queues its header.
  void start_region(uint32_t r, uint64_t seq);
  // Appends a record of `chunk` carrying `data` to the active region (which
  // has room); sets chunk.location. The record lands with its batch.
  void append(PendingChunk chunk, std::string_view data);
  // The next record starts a new batch, at the write alignment (flush, and
  // before a new region).
  void seal();
  // Picks batches to send now, in order, up to the in-flight limit.
  void kick(std::vector<IoRequest*>& to_submit);
  // Sends what kick() picked through `engine` (the one start() was given);
  // call without the write lock. Static: it touches only the batches.
  static void submit(IoEngine& engine, std::vector<IoRequest*>& batches);
  // From the landing handler: the batch no longer holds a write slot or its
  // region. Keeps its buffer for reuse; its chunks stay for the callbacks.
  void release_landed(WriteBatch& batch, bool ok);
  // From the landing handler, once the batch's callbacks ran.
  void finish_callbacks();
  // clear(): the next record opens a region.
  void forget_active_region();

  // Nothing queued, in flight or in its callbacks.
  bool idle() const;
  // Waits once for a batch to land (or a notify()); `owner_mu` is the
  // owner's write lock. Callers loop on their condition.
  void wait(Mutex& owner_mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(owner_mu) { changed_.wait(owner_mu); }
  void notify() { changed_.notify_all(); }
  // Bytes accepted and not yet landed.
  uint64_t pending_bytes() const { return pending_bytes_; }

 private:
  friend struct WriteBatch;
  void on_batch_complete(WriteBatch* batch, int64_t result);
  std::unique_ptr<WriteBatch> new_batch(uint32_t region, uint64_t offset, uint64_t bytes);
  // Appends `bytes` of zeros to the active batch (alignment padding).
  void pad_active(uint64_t bytes);

  const Options options_;
  RegionManager& regions_;
  IoEngine* engine_ = nullptr;
  uint64_t salt_ = 0;
  uint32_t write_alignment_ = kBlockSize;
  Landed landed_;

  int64_t active_region_ = -1;
  uint64_t active_offset_ = 0;  // next record's offset in the active region
  std::unique_ptr<WriteBatch> active_;
  std::deque<std::unique_ptr<WriteBatch>> sealed_;  // waiting for a write slot
  uint32_t writes_in_flight_ = 0;
  uint32_t writes_finishing_ = 0;  // landed, callbacks still running
  uint64_t pending_bytes_ = 0;
  std::vector<AlignedBuffer> spare_buffers_;
  CondVar changed_;
};

}  // namespace tierkv::flash
