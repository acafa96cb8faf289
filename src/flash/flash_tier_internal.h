// FlashTier's private state, shared by its implementation files (writes,
// open and recovery, reclaim, keys, snapshot). Not part of the public
// interface.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <absl/container/flat_hash_set.h>

#include "core/aligned_buffer.h"
#include "core/log_throttle.h"
#include "core/metrics.h"
#include "flash/chunk_reader.h"
#include "flash/device_sync.h"
#include "flash/flash_index.h"
#include "flash/flash_metrics.h"
#include "flash/flash_tier.h"
#include "flash/io_engine.h"
#include "flash/record.h"
#include "flash/superblock_store.h"

namespace tierkv::flash {

// Closes a file descriptor on scope exit.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~UniqueFd();
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

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
  uint64_t generation = 0;    // Impl::generation when accepted
  uint16_t record_flags = 0;  // kRecordTombstone, kRecordExpiry: nothing to index
  bool reinsertion = false;
  std::shared_ptr<StagingEntry> staging;  // a chunk of a staged object
  FlashTier::WriteCallback done;
};

// The landed chunks of a staged object (FlashTier::StagedObject), which
// readers do not see until its last chunk lands. Guarded by landing_mu.
struct StagingEntry {
  std::string key;
  uint64_t key_hash = 0;
  uint64_t version = 0;
  uint64_t object_size = 0;
  int64_t expire_at_ms = 0;
  uint64_t generation = 0;          // Impl::generation at begin_staged()
  std::vector<uint64_t> locations;  // per chunk; 0: not landed
  uint32_t landed = 0;
  bool lost = false;
};

// Chunk writes of one key hash accepted but not landed, and the removals
// that must stop them from being indexed when they land. Dropped when the
// last of those writes lands: removals after that need no help.
struct KeyInFlight {
  uint32_t writes = 0;
  std::vector<std::pair<std::string, uint64_t>> removed;  // key, up to version
};

// One buffer write: consecutive records of one region.
struct FlashTier::WriteBatch final : IoRequest {
  void on_complete(int64_t result) override;

  FlashTier* tier = nullptr;
  AlignedBuffer buffer;
  uint64_t used = 0;  // bytes filled (a whole number of blocks)
  uint32_t region = 0;
  uint64_t region_offset = 0;  // where buffer[0] lands inside the region
  bool fsynced = false;
  // Its region's header failed to land: completes with an error, unwritten.
  bool doomed = false;
  bool carries_header() const { return region_offset == 0; }
  std::vector<PendingChunk> chunks;
};

struct RegionState {
  uint64_t seq = 0;             // 0: free
  uint64_t fill = 0;            // bytes written (header included)
  uint32_t pending_writes = 0;  // batches for this region not yet landed
  // Batches after the header batch wait until it has landed (and been
  // fsynced with fsync=always): a record acknowledged in a region whose
  // header is not on the device would not be found by recovery.
  bool header_landed = false;
  bool header_failed = false;
};

struct FlashTier::Impl {
  explicit Impl(MetricsRegistry& registry) : metrics(registry) {}

  UniqueFd fd;
  // Salt, layout, reserved region sequence numbers; made by recover().
  std::optional<SuperblockStore> super;
  std::unique_ptr<IoEngine> engine;
  FlashIndex index;
  FlashMetrics metrics;
  std::atomic<uint64_t> reclaim_epoch{0};

  // Landing: indexing a landed chunk and remove() are atomic under landing_mu,
  // so a removal is either seen by the landing or drops what it indexed.
  // Lock order: write_mu before landing_mu.
  std::mutex landing_mu;
  absl::flat_hash_map<uint64_t, KeyInFlight> in_flight;  // by key hash
  absl::flat_hash_set<StagingEntry*> staging;            // of live StagedObjects
  // Bumped by clear() (holding write_mu and landing_mu): chunks accepted
  // under an older generation are not indexed.
  uint64_t generation = 0;
  bool clearing = false;  // write_mu: clear() is waiting for writes to land

  // Write errors are logged at most once a second (device full: every write fails).
  LogThrottle error_log;

  // Write side, guarded by write_mu.
  std::mutex write_mu;
  std::condition_variable writes_idle;
  std::vector<RegionState> regions;
  std::deque<uint32_t> free_regions;
  std::deque<uint32_t> fifo;  // regions holding data, oldest first
  int64_t active_region = -1;
  uint64_t active_offset = 0;  // next record's offset in the active region
  std::unique_ptr<WriteBatch> active;
  std::deque<std::unique_ptr<WriteBatch>> sealed;  // waiting for a write slot
  uint32_t writes_in_flight = 0;
  uint32_t writes_finishing = 0;  // landed, callbacks still running
  uint64_t pending_bytes = 0;
  // Tombstones and expiry records that found no room yet (the region to
  // reclaim still had writes in flight); retried in order as writes land.
  std::deque<PendingChunk> deferred_meta;
  // The newest version any record names (recovered or written since).
  std::atomic<uint64_t> max_version_seen{0};
  // A snapshot is on the device and still valid: the next record drops it.
  bool snapshot_on_device = false;
  uint64_t used_bytes = 0;
  std::vector<AlignedBuffer> spare_buffers;
  // The reinsertion reclaimer, woken when the last free region is taken.
  std::condition_variable reclaim_cv;
  std::condition_variable reclaim_idle;  // it found nothing to do
  bool reclaim_stop = false;
  std::thread reclaimer;

  // Region pins (see FlashTier::RegionPins), guarded by pin_mu. Lock order:
  // write_mu, then pin_mu, then the index's shard locks. Sized once, at open.
  std::mutex pin_mu;
  std::vector<uint32_t> region_readers;
  // Reclaimed while pinned: out of the index, not yet free. clear() resets
  // these (it frees every region itself).
  std::vector<bool> region_draining;
  uint64_t regions_draining = 0;

  // The read path below the index; made by start_engine().
  std::unique_ptr<ChunkReader> reader;

  // fdatasync when something landed; once a second with fsync=everysec.
  DeviceSync device_sync{metrics.fsyncs};
};

}  // namespace tierkv::flash
