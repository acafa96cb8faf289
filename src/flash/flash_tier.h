// FlashTier: the SSD tier. A log of checksummed chunk records on one file or
// block device, cut into regions, with a compact DRAM index.
//
//   auto flash = tierkv::flash::FlashTier::open({.path = "/data/tierkv/"}, &metrics);
//   (*flash)->write_chunk({.key = k, .chunk_index = 0, .version = v, .data = bytes},
//                         [](tierkv::Status st) { ... });          // after it lands
//   (*flash)->read_chunk(k, 0, v, [](tierkv::Result<FlashChunk> r) { ... });
//
// * Writes append records to the active region through 4 KiB-aligned buffers
//   (O_DIRECT where the file system allows it). While the allowed number of
//   buffer writes is in flight, new records gather in the next buffer and go
//   down together (group commit). A chunk becomes readable, and its callback
//   runs, when its buffer has landed (and been fsynced, with fsync=always).
// * Reads are asynchronous with at most `queue_depth` in flight; more wait in
//   a queue. Every read verifies the checksum and the record's identity; a
//   mismatch is a miss (logged, counted), never bad data.
// * When no free region is left, the oldest region is reclaimed (FIFO): its
//   chunks leave the index. With reinsertion on, chunks read since they were
//   written are first copied to the head of the log.
// * open() rebuilds the index by scanning the regions in sequence order; the
//   newest *complete* version of each object wins (a crash in the middle of
//   a multi-chunk write leaves the previous version), torn or corrupt records
//   are dropped. Checksums are salted per device and bound to the record's
//   place, so bytes stored as values can never be taken for records.
// * Removal drops the index entry and writes a tombstone record, which
//   recovery honours for the versions it covers. A write of a removed version
//   still in flight is never indexed when it lands.
// * Layout: two superblock slots (salt, layout, reserved region sequence
//   numbers), then the regions (see record.h).
// * Each object version carries an expiry (unix ms, 0: none), stored and
//   returned but not enforced here: the Store decides what is expired.
//
// Callbacks run on the tier's I/O threads and must not block for long. All
// methods are thread-safe.
#pragma once

#include <absl/functional/function_ref.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/buffer_pool.h"
#include "core/metrics.h"
#include "core/status.h"
#include "flash/flash_index.h"
#include "flash/flash_types.h"
#include "flash/record.h"
#include "flash/reinsertion_policy.h"

namespace tierkv::flash {

class IoEngine;
struct IoRequest;
struct PendingChunk;
struct ReclaimRound;
struct StagingEntry;
struct WriteBatch;
struct ChunkRead;
class SnapshotReader;

class FlashTier {
 public:
  using WriteCallback = std::function<void(Status)>;
  using ReadCallback = std::function<void(Result<FlashChunk>)>;
  using ChunkReadCallback = std::function<void(uint32_t chunk_index, Result<FlashChunk>)>;

  // Opens (or creates) the flash file and recovers its index. Metrics go to
  // `metrics` if given, else to a registry the tier owns.
  static Result<std::unique_ptr<FlashTier>> open(const FlashOptions& options,
                                                 MetricsRegistry* metrics = nullptr);
  // Waits for accepted writes and started reads to finish.
  ~FlashTier();
  FlashTier(const FlashTier&) = delete;
  FlashTier& operator=(const FlashTier&) = delete;

  // Queues one chunk. On OK, `done` runs once the chunk is durable per the
  // fsync policy and readable (Conflict if a newer version was indexed
  // meanwhile or the version was removed or cleared while in flight, IOError
  // if the device failed). On error (TooLarge, Busy), nothing was queued and
  // `done` never runs.
  Status write_chunk(const ChunkWrite& chunk, WriteCallback done);
  // Several chunks, submitted together; `done` runs once, after the last,
  // with the first error if any.
  Status write_chunks(std::span<const ChunkWrite> chunks, WriteCallback done);

  // Reads one chunk (of `version`, if given). On OK, `done` runs exactly once
  // with the chunk or a miss. NotFound (and no callback) if not indexed.
  Status read_chunk(std::string_view key, uint32_t chunk_index, std::optional<uint64_t> version,
                    ReadCallback done);
  // Where every chunk of one version was when asked: a read that spans
  // many chunks keeps it, so that a newer version replacing this one in the
  // index meanwhile does not cut the read short (the old records stay on
  // the device until their region is reclaimed, which the epoch detects).
  //
  // It also pins the regions those chunks are in: a region reclaimed while
  // pinned leaves the index at once (new reads miss), but no writer gets it
  // before the last pin is dropped, so a read already under way (a GET whose
  // first bytes are on the wire) still finds every chunk it was promised.
  class RegionPins {
   public:
    RegionPins() = default;
    RegionPins(RegionPins&& other) noexcept;
    RegionPins& operator=(RegionPins&& other) noexcept;
    RegionPins(const RegionPins&) = delete;
    RegionPins& operator=(const RegionPins&) = delete;
    ~RegionPins() { reset(); }
    void reset();
    size_t size() const { return regions_.size(); }

   private:
    friend class FlashTier;
    const FlashTier* tier_ = nullptr;
    std::vector<uint32_t> regions_;
  };
  struct VersionLocations {
    uint64_t version = 0;
    int64_t expire_at_ms = 0;
    uint64_t reclaim_epoch = 0;
    std::vector<uint64_t> locations;  // per chunk; 0: not readable then
    RegionPins pins;                  // the regions of `locations`
  };
  // kNone takes no pins: for a read of one chunk, which sends nothing before
  // that chunk is read and checked, so a reclaim under it is a plain miss.
  // Pins cost a global lock on every read (twice: pin and unpin).
  enum class Pinning { kPin, kNone };
  std::optional<VersionLocations> locate_version(std::string_view key, uint64_t version,
                                                 Pinning pinning = Pinning::kPin) const;
  // Reads several chunks of one object, issued together. `done` runs once per
  // chunk, in completion order; for chunks not on flash, before this returns.
  // With `known` (of `version`), a chunk no longer indexed is read from where
  // `known` saw it. Background reads (promotions no reader waits for) yield
  // the device queue: a demand read waiting for a slot goes first, and they
  // hold at most half of queue_depth.
  void read_chunks(std::string_view key, std::span<const uint32_t> chunk_indexes,
                   std::optional<uint64_t> version, ChunkReadCallback done,
                   const VersionLocations* known = nullptr,
                   ReadPriority priority = ReadPriority::kDemand);

  // Index-only questions: no I/O. lookup() takes one shard lock.
  std::optional<FlashObjectInfo> lookup(std::string_view key) const;
  // The same without the chunk list (no allocation): for the read path.
  std::optional<FlashObjectSummary> summary(std::string_view key) const;
  bool contains(std::string_view key, uint32_t chunk_index,
                std::optional<uint64_t> version = std::nullopt) const;
  // True if chunks 0..chunk_count-1 of `version` are all indexed and readable.
  bool contains_object(std::string_view key, uint64_t version, uint32_t chunk_count) const;

  // Sets the expiry (unix ms, 0: none) of the key if `version` is the one
  // indexed, and appends an expiry record so that it survives a restart.
  // False if the key is not indexed at that version. `durable`, if given,
  // runs once the record landed (at once with OK when this returns false).
  bool set_expiry(std::string_view key, uint64_t version, int64_t expire_at_ms,
                  std::function<void(Status)> durable = {});
  // Drops the key if its indexed version is <= up_to_version and queues a
  // tombstone covering every version <= up_to_version, so that a restart
  // does not bring them back. Guarantee: a chunk write of the key with
  // version <= up_to_version accepted before this returns is never indexed
  // (its callback gets Conflict). True if an index entry was dropped.
  bool remove(std::string_view key, uint64_t up_to_version, RemoveOptions options = {});
  // Drops the key if its indexed version is < below_version, and keeps
  // writes of such versions still in flight from being indexed; no
  // tombstone: the caller holds a newer version that will supersede them on
  // flash. True if an index entry was dropped.
  bool forget(std::string_view key, uint64_t below_version);
  // While alive, removals of `key` (remove, forget) are remembered as for a
  // write in flight: a write of the key accepted before the hold ends is
  // stopped by any removal made since it began. For a caller that must check
  // elsewhere that a version is still wanted, then write it, with no window
  // in which a removal could slip between the check and the acceptance.
  class KeyHold {
   public:
    KeyHold(KeyHold&& o) noexcept : tier_(std::exchange(o.tier_, nullptr)), hash_(o.hash_) {}
    KeyHold& operator=(KeyHold&&) = delete;
    ~KeyHold();

   private:
    friend class FlashTier;
    KeyHold(FlashTier* tier, uint64_t hash) : tier_(tier), hash_(hash) {}
    FlashTier* tier_;
    uint64_t hash_;
  };
  [[nodiscard]] KeyHold hold_key(std::string_view key);

  // An object written chunk by chunk that readers see whole or not at all
  // (preheat, values larger than memory; flash_staged.cc). Its chunks land
  // where readers cannot see them; the last chunk (chunk_count - 1) may be
  // written only once all the others landed, and when it lands the whole
  // object replaces the indexed version in one step. It is refused
  // (Conflict) if, since begin_staged(), the key was removed, a newer
  // version was indexed, flash was cleared, or a staged chunk was lost (a
  // failed write, its region reclaimed). Without its last chunk the version
  // is incomplete on the device, so recovery ignores it and keeps the
  // version before: dropping an uncommitted StagedObject leaves garbage,
  // never a visible object. Must not outlive the tier.
  struct StagedObjectSpec {
    std::string_view key;
    uint64_t version = 0;
    uint64_t object_size = 0;
    uint32_t chunk_count = 0;
    int64_t expire_at_ms = 0;
  };
  class StagedObject {
   public:
    StagedObject(StagedObject&& o) noexcept;
    StagedObject& operator=(StagedObject&&) = delete;
    ~StagedObject();
    // Queues chunk `chunk_index`; `done` as for write_chunk(). Busy when the
    // write queue is full (retry later); InvalidArgument for the last chunk
    // before the others landed, or an index out of range.
    Status write_chunk(uint32_t chunk_index, std::string_view data, WriteCallback done);
    // The object's expiry, carried by its last chunk (the one that makes it
    // visible) and the index: set it before that chunk is written.
    void set_expiry(int64_t expire_at_ms);
    // Chunks landed so far (the last one included once the object is visible).
    uint32_t chunks_landed() const;
    uint32_t chunk_count() const;
    // A chunk failed or was lost, or the key changed: the last chunk can
    // only be refused.
    bool lost() const;
    // Lost because a later removal or a newer version of the key replaced
    // it while it landed: the write took effect, then was overwritten.
    bool superseded() const;

   private:
    friend class FlashTier;
    StagedObject(FlashTier* tier, std::shared_ptr<StagingEntry> entry, KeyHold hold);
    FlashTier* tier_;
    std::shared_ptr<StagingEntry> entry_;
    KeyHold hold_;
  };
  Result<StagedObject> begin_staged(const StagedObjectSpec& spec);

  // Drops everything, durably: once this returns, nothing written before it
  // is readable or recovered after a restart, and writes in flight at the
  // call get Conflict. Writes attempted while it runs get Busy.
  void clear();

  // Key space, for SCAN/KEYS/RANDOMKEY/DBSIZE. The index is sharded; each
  // shard's keys come back in one call (a consistent snapshot of the shard).
  size_t key_shard_count() const;
  std::vector<std::string> keys_in_shard(size_t shard) const;
  // A bounded page of keys in hash order (see FlashIndex::keys_from).
  std::vector<std::string> keys_from(uint64_t from_hash, size_t max, uint64_t* next) const;
  std::optional<std::string> random_key() const;
  uint64_t object_count() const;
  // Of object_count(), those indexed without their key: listing them reads
  // each key from the device.
  uint64_t compact_object_count() const;

  // Pushes out buffered writes and waits until all accepted so far landed
  // (fdatasync'ed too unless fsync=none).
  void flush();
  // Waits until no chunk read is queued, in flight or in its callback
  // (which may start more). The owner calls it before letting go of the
  // tier, once nothing starts reads any more: callbacks that read through
  // the owner have then finished.
  void wait_reads_idle();
  // Waits (up to `timeout`) until the reclaimer has caught up with the
  // writers; false on timeout. For tests and tools that want reinsertion
  // (or the lists writers reclaim by) to happen deterministically (writers
  // never wait for it).
  bool wait_for_reclaimer(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Clean shutdown: writes the index and region state to the device, so the
  // next open loads them instead of scanning (flash_snapshot.cc). Stops
  // reinsertion. A write after it (a late command) discards the snapshot.
  Status write_snapshot();

  FlashStats stats() const;
  // Bytes accepted and not yet written, and the bound beyond which writes
  // answer Busy (flash-write-queue): how busy the write path is, for
  // background work that must leave it to writers.
  uint64_t pending_write_bytes() const;
  uint64_t max_pending_write_bytes() const { return options_.max_pending_write_bytes; }
  const RecoveryStats& recovery() const { return recovery_; }
  // Highest object version indexed at open: new versions must exceed it.
  uint64_t recovered_max_version() const { return recovered_max_version_; }
  std::string_view io_backend() const;
  bool direct_io() const { return direct_io_; }
  // Smallest length and offset multiple O_DIRECT accepts on the file (512 on
  // most devices, 4096 at most); 1 with buffered I/O.
  uint32_t io_alignment() const { return io_alignment_; }
  const std::string& file_path() const { return file_path_; }
  uint64_t capacity() const { return uint64_t{region_count_} * options_.region_size; }

 private:
  struct Impl;
  FlashTier(const FlashOptions& options, MetricsRegistry* metrics);
  // Opening (flash_open.cc).
  Status open_device();
  void detect_io_alignment();
  Status recover();
  Status scan_regions();
  void log_recovery() const;
  uint64_t salt() const;
  // The snapshot (flash_snapshot.cc): loaded at open, if there is a valid
  // one; dropped before the first write after one was written.
  bool load_snapshot();
  const char* parse_snapshot(SnapshotReader& in);
  Status drop_snapshot_locked();
  // Byte offset of region r on the device.
  uint64_t region_start(uint32_t region) const;
  // Drops index entries of the key up to `up_to_version` and stops writes of
  // such versions in flight from being indexed. Returns {dropped, pending}.
  std::pair<bool, bool> drop_versions(std::string_view key, uint64_t key_hash,
                                      uint64_t up_to_version);
  Status start_engine();
  // Write path (flash_tier.cc); *_locked need impl_->write_mu (or landing_mu,
  // where said). Impl is incomplete here, so they cannot say REQUIRES: each
  // asserts its lock for the analysis of its body.
  Status enqueue_writes(std::span<const ChunkWrite> chunks, std::vector<WriteCallback> done,
                        const std::shared_ptr<StagingEntry>& staging = nullptr);
  // A staged chunk landed (landing_mu held): records it, and for the last
  // chunk installs the whole object.
  Status land_staged_locked(PendingChunk& chunk);
  // Marks the staged objects with a chunk in `region` lost (landing_mu held).
  void lose_staged_in_region_locked(uint32_t region);
  Status append_locked(PendingChunk chunk, std::string_view data);
  // A record without data (tombstone, expiry); queued past the byte limit.
  // Returns the record's callback if it was not queued (clear() is wiping
  // what it would describe): the caller runs it after releasing write_mu.
  WriteCallback append_meta_locked(PendingChunk chunk, std::vector<IoRequest*>& to_submit);
  struct MetaRecord {
    uint16_t flags = 0;  // kRecordTombstone or kRecordExpiry
    int64_t expire_at_ms = 0;
    bool lazy = false;  // PendingChunk::lazy
  };
  // Appends the metadata record of `key` and submits it; `done` runs once it
  // is durable. `index_first` runs before, under write_mu, so that index
  // order and log order agree: if it returns false nothing is written,
  // `done` runs at once, and so does this.
  bool write_meta(std::string_view key, uint64_t key_hash, uint64_t version, MetaRecord meta,
                  WriteCallback done, absl::FunctionRef<bool()> index_first);
  // fsync=everysec's tick: lazy records go down before the next sync.
  void release_lazy_records();
  void append_deferred_meta_locked();
  void release_lazy_meta_locked();
  void index_landed(WriteBatch& batch, std::vector<Status>& outcomes, uint64_t& user_bytes);
  void log_write_error(const WriteBatch& batch, int64_t result);
  Status wipe_region_headers();
  Status open_region_locked();
  // Reclaim (flash_reclaim.cc).
  // Reinsertion reads the device, so RegionManager's reclaimer thread runs
  // it through a Copier, on the oldest regions before writers reclaim
  // them: writers never wait for it. Without reinsertion its rounds only
  // list those regions' chunks, for the writers' reclaims.
  class Copier;
  void start_reclaimer();
  void stop_reclaimer();
  // A round of the reclaimer: the region is taken and pinned (write_mu
  // held); its read chunks are marked and read (without it,
  // list_reclaim_round and read_reinsertions); their copies are appended
  // (write_mu held).
  void begin_reclaim_round_locked(uint32_t region, ReclaimRound& round);
  // Marks the round's chunks for reinsertion (if on) and lists all of its
  // region's (take_region_list_locked). No lock held.
  void list_reclaim_round(ReclaimRound& round, AlignedBuffer& region_buffer);
  // The same by reading the region into `region_buffer` and looking up its
  // records (FlashIndex::mark_records): O(region), not O(index). False,
  // with nothing marked, if the index is small enough to walk
  // (round_read_min_chunks) or the region did not read and parse cleanly.
  bool mark_round_by_records(ReclaimRound& round, AlignedBuffer& region_buffer,
                             std::vector<RegionResident>& residents);
  // The list a reclaimer round made of `region`'s chunks, if complete and
  // not spoiled; forgets it either way. landing_mu held.
  std::optional<std::vector<RegionResident>> take_region_list_locked(uint32_t region);
  // A chunk at `location` is being indexed: a list of its region is no
  // longer complete. landing_mu held.
  void spoil_region_list_locked(uint64_t location);
  // Drops the region's chunks from the index, by `listed` if there is one.
  void drop_region_chunks_locked(uint32_t region,
                                 const std::optional<std::vector<RegionResident>>& listed);
  void read_reinsertions(ReclaimRound& round);
  void finish_reclaim_round_locked(ReclaimRound& round, std::vector<IoRequest*>& to_submit);
  // Drops the region's chunks from the index (except those a reinsertion
  // round is relocating) and empties it. True if it may be written at once;
  // false if reads pin it (it is draining: the last unpin frees it).
  bool reclaim_locked(uint32_t region);
  void unpin_regions(std::span<const uint32_t> regions) const;
  // Overwrites a draining region's header with a free one (see .cc).
  void retire_region_header_locked(uint32_t region);
  void on_write_done(WriteBatch* batch, int64_t result);
  void update_space_gauges_locked();
  void update_index_gauges();
  // The key of the record at `loc`, read and verified (the index's
  // KeyReader: compact entries keep their keys on flash only).
  std::optional<std::string> read_key_at(uint64_t loc) const;
  // A read of the chunk as the index (or `known`) has it; null if not on flash.
  std::unique_ptr<ChunkRead> prepare_read(std::string_view key, uint32_t chunk_index,
                                          std::optional<uint64_t> version,
                                          const VersionLocations* known = nullptr);

  FlashOptions options_;
  std::string file_path_;
  bool direct_io_ = false;
  uint32_t io_alignment_ = 1;
  uint32_t region_count_ = 0;
  Layout layout_;
  RecoveryStats recovery_;
  uint64_t recovered_max_version_ = 0;
  std::unique_ptr<MetricsRegistry> owned_metrics_;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<Copier> copier_;  // outlives the reclaimer
};

}  // namespace tierkv::flash
