// FlashTier's private state, shared by its implementation files (writes,
// open and recovery, reclaim, keys, snapshot). Not part of the public
// interface.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <absl/container/flat_hash_set.h>

#include "core/aligned_buffer.h"
#include "core/log_throttle.h"
#include "core/metrics.h"
#include "core/mutex.h"
#include "core/unique_fd.h"
#include "flash/chunk_reader.h"
#include "flash/device_sync.h"
#include "flash/flash_index.h"
#include "flash/flash_metrics.h"
#include "flash/flash_tier.h"
#include "flash/io_engine.h"
#include "flash/log_writer.h"
#include "flash/record.h"
#include "flash/region_manager.h"
#include "flash/region_reclaimer.h"
#include "flash/superblock_store.h"

namespace tierkv::flash {

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
  // Lost because a later operation on the key (a removal, a newer version)
  // replaced it, not because a chunk failed or its region was reclaimed.
  bool superseded = false;
};

// Chunk writes of one key hash accepted but not landed, and the removals
// that must stop them from being indexed when they land. Dropped when the
// last of those writes lands: removals after that need no help.
struct KeyInFlight {
  uint32_t writes = 0;
  std::vector<std::pair<std::string, uint64_t>> removed;  // key, up to version
};

// A chunk reinsertion copies: its record, read back from the device.
struct Reinsert {
  PendingChunk chunk;
  AlignedBuffer buffer;
  std::string_view data;  // inside buffer
};

// One round of the reclaimer thread: a region it copies from, and the
// chunks it keeps.
struct ReclaimRound {
  uint32_t region = 0;
  uint64_t generation = 0;  // Impl::generation when it began
  uint64_t seq = 0;         // the region's incarnation
  uint64_t fill = 0;        // its bytes written, header included
  // The region's first `parsed` bytes, if the round read and parsed them
  // (FlashTier::mark_round_by_records): the copies are taken from them.
  const char* region_bytes = nullptr;
  uint64_t parsed = 0;
  std::vector<ReinsertCandidate> hits;
  RegionYield yield;
  std::vector<Reinsert> copies;
};

// The reclaimer's view of the tier (flash_reclaim.cc): one round at a time,
// on the reclaimer's thread.
class FlashTier::Copier final : public RegionCopier {
 public:
  explicit Copier(FlashTier& tier) : tier_(tier) {}
  bool may_copy() const override;
  void mark_kept(uint32_t region) override;
  void read_kept() override;
  void append_kept() override;
  void submit() override;

 private:
  FlashTier& tier_;
  ReclaimRound round_;
  // A region's bytes, read by a round; kept across rounds (one region each).
  AlignedBuffer region_buffer_;
  std::vector<IoRequest*> to_submit_;
};

struct FlashTier::Impl {
  Impl(MetricsRegistry& registry, const LogWriter::Options& log_options, uint64_t expected_objects,
       uint64_t index_hash_mask)
      : index(kIndexShards, expected_objects, index_hash_mask),
        metrics(registry),
        log(log_options, regions) {}
  static constexpr uint32_t kIndexShards = 16;
  // What sizes the compact index's buckets: one object per KiB of flash.
  static constexpr uint64_t kBytesPerExpectedObject = 1024;

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
  Mutex landing_mu;
  absl::flat_hash_map<uint64_t, KeyInFlight> in_flight ABSL_GUARDED_BY(landing_mu);  // by key hash
  // of live StagedObjects
  absl::flat_hash_set<StagingEntry*> staging ABSL_GUARDED_BY(landing_mu);
  // The chunks a reclaimer round found in its region (FlashIndex::
  // mark_for_reinsertion), kept for the writer that reclaims the region: it
  // drops them by the list (drop_listed) instead of walking the whole index,
  // which took 131 ms a reclaim at 8 M objects, under the write lock, and
  // grows with the index.
  // A staged object whose chunk in a listed region lands after the walk
  // spoils the list, and the writer walks. Dropped by reclaim and clear().
  struct RegionList {
    std::vector<RegionResident> residents;
    bool complete = false;  // the walk finished
    bool spoiled = false;
  };
  absl::flat_hash_map<uint32_t, RegionList> region_lists ABSL_GUARDED_BY(landing_mu);
  // Bumped by clear() (holding write_mu and landing_mu): chunks accepted
  // under an older generation are not indexed. Not annotated: it is read
  // under either lock, which GUARDED_BY cannot say.
  uint64_t generation = 0;
  // clear() is waiting for writes to land
  bool clearing ABSL_GUARDED_BY(write_mu) = false;

  // Write errors are logged at most once a second (device full: every write fails).
  LogThrottle error_log;

  // Write side, guarded by write_mu (the region table, the log writer, and
  // what follows); RegionManager's pins nest inside it, then the index.
  Mutex write_mu ABSL_ACQUIRED_BEFORE(landing_mu);
  // Its table needs write_mu and its pins their own lock; not annotated
  // here because RegionManager cannot name write_mu, and reads unpin
  // without it.
  RegionManager regions{metrics.regions_draining};
  LogWriter log ABSL_GUARDED_BY(write_mu);
  // Tombstones and expiry records that found no room yet (the region to
  // reclaim still had writes in flight); retried in order as writes land.
  std::deque<PendingChunk> deferred_meta ABSL_GUARDED_BY(write_mu);
  // Lazy tombstones (RemoveOptions::lazy) held back until a block's worth
  // has gathered, a flush, or fsync=everysec's tick: written one by one
  // they cost a padded block each (a 4 KiB record never shares its block).
  std::vector<PendingChunk> lazy_meta ABSL_GUARDED_BY(write_mu);
  uint64_t lazy_meta_bytes ABSL_GUARDED_BY(write_mu) = 0;
  // The newest version any record names (recovered or written since).
  std::atomic<uint64_t> max_version_seen{0};
  // A snapshot is on the device and still valid: the next record drops it.
  bool snapshot_on_device ABSL_GUARDED_BY(write_mu) = false;

  // The read path below the index; made by start_engine().
  std::unique_ptr<ChunkReader> reader;

  // fdatasync when something landed; once a second with fsync=everysec.
  DeviceSync device_sync{metrics.fsyncs};
};

}  // namespace tierkv::flash
