// The value types of FlashTier's API (flash_tier.h): how a tier is opened
// (FlashOptions), what a write and a removal carry, a chunk read back, and
// the tier's recovery and running statistics. Plain data; no locking.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/aligned_buffer.h"
#include "core/buffer_pool.h"
#include "core/status.h"
#include "flash/record.h"
#include "flash/reinsertion_policy.h"

namespace tierkv::flash {

class IoEngine;

enum class FsyncPolicy : uint8_t { kNone, kEverySec, kAlways };
enum class IoBackend : uint8_t { kAuto, kUring, kThreadPool };

// How far open() has got recovering the index, for a caller that serves
// progress (INFO loading fields) from another thread.
struct RecoveryProgress {
  std::atomic<uint64_t> bytes_done{0};
  std::atomic<uint64_t> bytes_total{0};
  std::atomic<uint64_t> start_ms{0};  // unix ms
  std::atomic<bool> from_snapshot{false};
};

struct FlashOptions {
  // A file, a block device, or a directory (existing, or ending in '/'),
  // which then holds the file "flash.dat".
  std::string path = "./tierkv-data/";
  uint64_t size = uint64_t{8} << 30;          // rounded down to whole regions
  uint64_t region_size = uint64_t{64} << 20;  // multiple of 4 KiB, 64 KiB..1 GiB
  // Share of the region space kept for the index snapshot of a clean stop
  // (record.h: Layout), in (0, kMaxSnapshotFraction]. A change moves the
  // region count: the snapshot of the old layout is refused (a scan), and
  // regions past the new count are dropped.
  double snapshot_area = kDefaultSnapshotFraction;
  FsyncPolicy fsync = FsyncPolicy::kNone;
  uint32_t queue_depth = 64;  // device reads in flight
  bool reinsertion = false;   // hit-based reinsertion on reclaim
  double reinsertion_share = HitsReinsertionPolicy::kDefaultMaxFraction;  // of each region
  uint64_t backing_latency_ns = 0;
  uint64_t backing_bandwidth = 0;  // bytes/s shared by reads (model); 0: none
  // Tests: the crash scan sleeps this long per record it loads, so that a
  // server can be watched while loading whatever the device's speed.
  uint64_t key_load_delay_us = 0;
  IoBackend io_backend = IoBackend::kAuto;  // kAuto: io_uring, else threads
  bool direct_io = true;                    // O_DIRECT when supported
  // Buffered I/O only: a demand read first copies from the page cache on
  // the caller's thread (preadv2 RWF_NOWAIT) if every byte is there, and
  // goes to the engine otherwise. Off with a read model (backing_*) or a
  // wrapped engine, which must see every read.
  bool page_cache_reads = true;
  bool preallocate = true;  // fallocate the file at open
  uint64_t write_buffer_size = uint64_t{4} << 20;
  uint32_t max_write_inflight = 4;  // buffer writes in flight
  // Accepted-but-unwritten bytes beyond which writes answer Busy.
  uint64_t max_pending_write_bytes = uint64_t{64} << 20;
  // Where chunk reads take their buffers (kept mapped for reuse); null: a
  // fresh allocation each. Must outlive the tier and every chunk it reads.
  BufferPool* buffer_pool = nullptr;
  // Updated while open() recovers, if given; must outlive open().
  RecoveryProgress* progress = nullptr;
  // Fault injection for tests: given the engine open() chose, returns the
  // one the tier uses (e.g. a wrapper that holds or fails chosen requests),
  // so orderings that depend on I/O timing can be tested deterministically.
  std::function<std::unique_ptr<IoEngine>(std::unique_ptr<IoEngine>)> wrap_engine;
  // Tests: runs on the reclaimer after it has read a region's hot chunks
  // and before it appends their copies (no lock held), so that a DEL or an
  // EXPIRE can land exactly there.
  std::function<void()> after_reinsert_read;
  // Tests: runs on the reclaimer once it has marked a region's hot chunks
  // and before it decides which to copy (no lock held).
  std::function<void()> before_reinsert_read;
  // Tests: after a reclaim that dropped its region's chunks by a reclaimer
  // round's list, walk the index and abort if any chunk there was missed.
  bool check_region_lists = false;
  // A reclaimer round finds its region's chunks by reading the region and
  // looking up each of its records once the index holds at least this many
  // chunks; below, by walking the whole index, which reads nothing. Unset:
  // region_size / 16 (a walk of the index costs ~16 ns a chunk at tens of
  // millions; reading a region about 1 ns a byte, plus a lookup a record).
  std::optional<uint64_t> round_read_min_chunks;
  // Reinsertion skips a hot chunk whose object (key, version) this says
  // is held elsewhere, e.g. in the memory tier above: a copy on flash
  // would duplicate it. Called on the reclaimer, no flash lock held.
  std::function<bool(std::string_view key, uint64_t version)> held_elsewhere;
  // Tests: the index keeps only these bits of each key's hash, so that
  // distinct keys share index entries (a forced collision). Key walks
  // (SCAN) then no longer follow the hash order the store expects.
  uint64_t index_hash_mask_for_test = ~uint64_t{0};
};

std::string_view fsync_policy_name(FsyncPolicy policy);

// The file or device a FlashOptions::path names: <path>/flash.dat for a
// directory (existing, or ending in '/'), else the path itself. Reads the
// file system; creates nothing.
struct FlashFile {
  std::string path;
  std::string folder;  // the directory that must exist first; empty if none
  bool block_device = false;
};
FlashFile flash_file(const std::string& configured_path);

struct RemoveOptions {
  // Write the tombstone even if nothing of the key is indexed or in flight
  // (the caller knows an older copy may be on the device, unindexed).
  bool always_tombstone = false;
  // The tombstone may wait for the next record that must go promptly, a
  // flush, or fsync=everysec's next tick, rather than take a block of its
  // own: an overwrite's, whose loss in a crash fsync none and everysec allow
  // (the older value may come back). A DEL's is never lazy.
  bool lazy = false;
  // Runs once the tombstone has landed (fsynced with fsync=always), or at
  // once with OK if none was needed. May run before remove() returns.
  std::function<void(Status)> durable;
};
Result<FsyncPolicy> parse_fsync_policy(std::string_view text);  // none|everysec|always

struct ChunkWrite {
  std::string_view key;
  uint32_t chunk_index = 0;
  uint64_t version = 0;
  uint64_t object_size = 0;  // of the whole object; 0 if unknown
  uint32_t chunk_count = 0;  // of the whole object; 0 if unknown (sizes the index)
  std::string_view data;
  // Unix ms, 0: none. Taken from the chunk that first indexes its version;
  // change it later with set_expiry(), not by rewriting chunks.
  int64_t expire_at_ms = 0;
};

// One chunk read back from flash. Owns its (aligned) buffer.
enum class ReadPriority : uint8_t { kDemand, kBackground };

class FlashChunk {
 public:
  FlashChunk(AlignedBuffer buffer, uint32_t data_offset, uint32_t data_length, uint32_t chunk_index,
             uint64_t version, uint64_t object_size, int64_t expire_at_ms = 0)
      : buffer_(std::move(buffer)),
        data_offset_(data_offset),
        data_length_(data_length),
        chunk_index_(chunk_index),
        version_(version),
        object_size_(object_size),
        expire_at_ms_(expire_at_ms) {}

  std::string_view data() const { return {buffer_.data() + data_offset_, data_length_}; }
  // The buffer data() lies in, at data_offset(): a reader may keep it (a
  // promotion makes it the memory chunk) instead of copying the bytes.
  AlignedBuffer& buffer() { return buffer_; }
  uint32_t data_offset() const { return data_offset_; }
  uint32_t chunk_index() const { return chunk_index_; }
  uint64_t version() const { return version_; }
  uint64_t object_size() const { return object_size_; }
  // The version's expiry as indexed when the read started (unix ms, 0: none).
  int64_t expire_at_ms() const { return expire_at_ms_; }

 private:
  AlignedBuffer buffer_;
  uint32_t data_offset_;
  uint32_t data_length_;
  uint32_t chunk_index_;
  uint64_t version_;
  uint64_t object_size_;
  int64_t expire_at_ms_;
};

struct RecoveryStats {
  uint64_t regions_scanned = 0;
  uint64_t regions_corrupt = 0;     // header present but failed its checksum
  uint64_t regions_old_format = 0;  // written by an older format: discarded
  uint64_t records_recovered = 0;
  uint64_t records_dropped = 0;  // torn or corrupt
  uint64_t tombstones = 0;
  uint64_t expiry_records = 0;
  // Newer versions whose chunks were not all written (a crash mid-write):
  // dropped, the version before them kept.
  uint64_t objects_incomplete = 0;
  uint64_t objects = 0;
  uint64_t duration_us = 0;
  bool from_snapshot = false;  // the index came from a clean shutdown's snapshot
};

struct FlashStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;  // written extents of live regions
  uint64_t regions = 0;
  uint64_t regions_used = 0;
  uint64_t objects = 0;
  uint64_t compact_objects = 0;  // of objects: single-chunk, indexed without their key
  uint64_t chunks = 0;
  uint64_t index_bytes = 0;
  uint64_t reclaims = 0;
  uint64_t reclaim_index_walks = 0;   // of reclaims: no reclaimer list, the whole index walked
  uint64_t reclaim_region_reads = 0;  // reclaimer rounds that read their region, not walking
  uint64_t regions_draining = 0;      // reclaimed, waiting for their readers
  uint64_t reinsertions = 0;
  // The reinsertion policy's evidence (flash-reinsertion on): the share of
  // fresh chunks and of copies read during their stay on flash, and whether
  // it copies its full share now (else a probe share).
  double reinsert_fresh_read_share = 0;
  double reinsert_copies_read_share = 0;
  bool reinsert_copying = false;
  uint64_t reads = 0;
  uint64_t read_bytes = 0;
  uint64_t checksum_failures = 0;
  uint64_t key_collisions = 0;  // reads that found another key's record (a shared ident)
  uint64_t device_write_bytes = 0;
  uint64_t user_write_bytes = 0;
  double write_amplification = 0;  // device bytes / user data bytes
  uint64_t read_errors = 0;        // failed device reads
  uint64_t write_errors = 0;       // failed device writes
};

}  // namespace tierkv::flash
