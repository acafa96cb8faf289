// FlashIndex: the DRAM index of flash-resident chunks.
//
// Two kinds of entry, by the key's 64-bit hash:
//  - compact: an object of one chunk (under 256 KiB, version below 2^45)
//    takes 21 bytes in a CompactTable, without its key. Its key is read
//    from its record on flash when it must be named (SCAN, KEYS, RANDOMKEY,
//    keys_in_shard), through the KeyReader the tier sets.
//  - keyed: any other object has one map slot holding its version, size and
//    expiry and a single heap block: one packed 8-byte location per chunk
//    slot, followed by the key bytes, plus 8 bytes in its shard's sampling
//    array (for random_key). Its overhead is amortized over its chunks.
// Calls that name a key look for a keyed entry of that key first, then for
// a compact entry of its hash. A compact entry is taken to be the key's, so
// a second key whose hash shares the entry's ident (CompactTable) sees the
// first key's entry: every read compares the key in the record it reads and
// answers a miss on a mismatch, so no key is ever served another's value.
// The odds are about n / 2^(40 + bucket bits + shard bits) per call.
//
// The expiry belongs to the indexed version: it is set by the chunk that
// creates the entry and changed only by set_expiry(), so a chunk of the same
// version that lands later cannot undo an expiry change made meanwhile.
//
// Only one version per object is indexed: adding a chunk of a newer version
// drops the older version's chunks (their records become garbage that FIFO
// reclaim removes); adding an older version is refused.
//
// Two keys with the same 64-bit hash (or compact ident) cannot both be
// indexed: the later one replaces the earlier (the cost is a spurious miss).
//
// Thread-safe: sharded by key hash, one mutex per shard.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/container/btree_set.h>
#include <absl/container/flat_hash_map.h>
#include <absl/functional/function_ref.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/mutex.h"
#include "flash/compact_table.h"
#include "flash/region_parse.h"

namespace tierkv::flash {

// A chunk's place on flash, packed into 8 bytes:
//   bits  0-19  offset inside the region of the record's 4 KiB block
//   bit   39    packed: the record lies inside that one block
//   packed:     bits 20-27 its offset inside the block, in 16-byte units
//               bits 28-36 its length (header + key + data), in 16-byte units
//   otherwise:  bits 20-37 its length, in 512-byte units; it starts the block
//   bit   38    a copy reinsertion made (not a fresh write of the object)
//   bits 40-61  region number
//   bit  62     read since written (for hit-based reinsertion)
//   bit  63     being relocated by reinsertion: not readable yet
// 0 means "no chunk": offset 0 of a region is its header, never a record.
// Records are laid 16-byte aligned, and one that would cross a block
// boundary starts the next block instead (see LogWriter), so every record
// of up to 4 KiB is packed and a read of it covers one block at most. The
// unpacked form is the layout of index snapshots written before packing
// (bit 39 was then always 0: no record reaches 256 MiB; bit 38 too, since
// a record is at most a 64 MiB chunk), so they still load.
namespace location {
inline constexpr uint64_t kBlock = 4096;
inline constexpr uint64_t kMaxBlocks = (uint64_t{1} << 20) - 1;
inline constexpr uint64_t kLengthUnit = 512;
inline constexpr uint64_t kMaxLengthUnits = (uint64_t{1} << 18) - 1;
inline constexpr uint64_t kMaxRecordBytes = kMaxLengthUnits * kLengthUnit;  // ~128 MiB
inline constexpr uint64_t kPackUnit = 16;
inline constexpr uint64_t kMaxRegion = (uint64_t{1} << 22) - 1;
inline constexpr uint64_t kCopyBit = uint64_t{1} << 38;
inline constexpr uint64_t kPackedBit = uint64_t{1} << 39;
inline constexpr uint64_t kHitBit = uint64_t{1} << 62;
inline constexpr uint64_t kRelocatingBit = uint64_t{1} << 63;

inline bool packed(uint64_t loc) {
  return (loc & kPackedBit) != 0;
}
// A record of `record_bytes` (<= kMaxRecordBytes) at byte `offset` of its
// region: a kPackUnit multiple inside one block, or a block's start.
inline uint64_t pack(uint32_t region, uint64_t offset, uint64_t record_bytes) {
  const uint64_t in_block = offset % kBlock;
  const uint64_t head = (offset / kBlock) | (uint64_t{region} << 40);
  if (in_block + record_bytes <= kBlock) {
    const uint64_t units = (record_bytes + kPackUnit - 1) / kPackUnit;
    return head | kPackedBit | (in_block / kPackUnit) << 20 | units << 28;
  }
  const uint64_t units = (record_bytes + kLengthUnit - 1) / kLengthUnit;
  return head | (units << 20);
}
// The record's byte offset inside its region.
inline uint64_t offset_bytes(uint64_t loc) {
  const uint64_t block = (loc & kMaxBlocks) * kBlock;
  return packed(loc) ? block + ((loc >> 20) & 0xff) * kPackUnit : block;
}
// The record's length rounded up to its unit: what a read must cover.
inline uint64_t length_bytes(uint64_t loc) {
  return packed(loc) ? ((loc >> 28) & 0x1ff) * kPackUnit
                     : ((loc >> 20) & kMaxLengthUnits) * kLengthUnit;
}
inline uint32_t region(uint64_t loc) {
  return static_cast<uint32_t>((loc >> 40) & kMaxRegion);
}

// The device range one read of the record takes, for a device that needs
// `alignment` (a power of two, at most 4 KiB): it never leaves the record's
// block (packed) or its blocks, so it stays inside the region.
struct ReadSpan {
  uint64_t start = 0;   // inside the region, aligned
  uint64_t length = 0;  // aligned
  uint64_t skew = 0;    // where the record starts inside the span
};
inline ReadSpan read_span(uint64_t loc, uint64_t alignment) {
  const uint64_t at = offset_bytes(loc);
  const uint64_t start = at & ~(alignment - 1);
  const uint64_t end = (at + length_bytes(loc) + alignment - 1) & ~(alignment - 1);
  return {start, end - start, at - start};
}

inline bool hit(uint64_t loc) {
  return (loc & kHitBit) != 0;
}
inline bool relocating(uint64_t loc) {
  return (loc & kRelocatingBit) != 0;
}
inline bool copy(uint64_t loc) {
  return (loc & kCopyBit) != 0;
}
// The location without its flag bits.
inline uint64_t place(uint64_t loc) {
  return loc & ~(kHitBit | kRelocatingBit | kCopyBit);
}
}  // namespace location

struct IndexedChunk {
  uint64_t location = 0;
  uint64_t version = 0;
  uint64_t object_size = 0;
  int64_t expire_at_ms = 0;
};

struct FlashObjectInfo {
  uint64_t version = 0;
  uint64_t object_size = 0;
  std::vector<uint32_t> chunks;  // indexes of the chunks on flash, ascending
  int64_t expire_at_ms = 0;      // unix ms; 0: none
};

// FlashObjectInfo without the chunk list: what the read path needs, with no
// allocation.
struct FlashObjectSummary {
  uint64_t version = 0;
  uint64_t object_size = 0;
  int64_t expire_at_ms = 0;
  uint32_t readable_chunks = 0;  // indexed and not being relocated
};

// A chunk whose region is being reclaimed and that was read since it was
// written: the tier rewrites it at the head of the log. A compact entry's
// candidate has no key (it is in the record): key is empty and key_hash is
// the entry's ident (FlashIndex::same_object tells whether a key is it).
struct ReinsertCandidate {
  std::string key;
  uint64_t key_hash = 0;
  uint32_t chunk_index = 0;
  uint64_t version = 0;
  uint64_t object_size = 0;
  uint64_t location = 0;  // where it is now (flag bits cleared)
  int64_t expire_at_ms = 0;
};

// What the indexed chunks of a reclaimed region did while they were there:
// how many were fresh writes and how many reinsertion copies, and how many
// of each were read. The reinsertion policy's evidence of whether copies
// earn the space they take.
struct RegionYield {
  uint64_t fresh = 0;
  uint64_t fresh_read = 0;
  uint64_t copies = 0;
  uint64_t copies_read = 0;

  void count(uint64_t loc) {
    uint64_t& n = location::copy(loc) ? copies : fresh;
    uint64_t& read = location::copy(loc) ? copies_read : fresh_read;
    ++n;
    if (location::hit(loc)) ++read;
  }
};

// A chunk that lay in a region when the walk before its reclaim found it:
// enough to find its entry again without walking the whole index.
struct RegionResident {
  uint64_t key_hash = 0;  // a keyed entry's hash, or a compact entry's ident
  uint64_t location = 0;  // flag bits cleared
  uint32_t chunk_index = 0;
  bool compact = false;
};

// One object's index entry as a snapshot holds it.
struct EntryImage {
  std::string_view key;
  uint64_t version = 0;
  uint64_t object_size = 0;
  int64_t expire_at_ms = 0;
  std::span<const uint64_t> locations;  // one per chunk slot; 0: not on flash
};

class FlashIndex {
 public:
  // The key of the record at `location` (flag bits cleared), read from
  // flash; nullopt if it cannot be read or is no longer there.
  using KeyReader = std::function<std::optional<std::string>(uint64_t location)>;

  // `expected_objects` sizes the compact tables' bucket arrays (about 64
  // objects a bucket at that count; more objects only make buckets longer).
  explicit FlashIndex(uint32_t shards = 16, uint64_t expected_objects = 0,
                      uint64_t hash_mask = ~uint64_t{0});
  ~FlashIndex();
  FlashIndex(const FlashIndex&) = delete;
  FlashIndex& operator=(const FlashIndex&) = delete;

  // Set before the key space is walked; called without any index lock.
  void set_key_reader(KeyReader reader) { key_reader_ = std::move(reader); }
  // The hash every call names `key` by: hash64, less the bits a test's
  // hash_mask clears to force collisions.
  uint64_t key_hash(std::string_view key) const;
  // True if a key of hash `key_hash` is the object a compact candidate's
  // key_hash (its ident) names.
  bool same_object(uint64_t candidate_hash, uint64_t key_hash) const {
    return compact_ident(key_hash) == candidate_hash;
  }

  // Indexes a chunk at `location`. False (nothing changed) if the object
  // already has a newer version. `chunk_count_hint` (0: unknown) sizes the
  // object's location array exactly. `expire_at_ms` applies only if this
  // chunk creates the entry (see above).
  bool add(std::string_view key, uint64_t key_hash, uint32_t chunk_index, uint64_t version,
           uint64_t object_size, uint64_t location, uint32_t chunk_count_hint = 0,
           int64_t expire_at_ms = 0);
  // The chunk's location, if indexed (and of `version`, if given). With
  // mark_hit, records the read for hit-based reinsertion.
  std::optional<IndexedChunk> lookup(std::string_view key, uint64_t key_hash, uint32_t chunk_index,
                                     std::optional<uint64_t> version, bool mark_hit);
  std::optional<FlashObjectInfo> object(std::string_view key, uint64_t key_hash) const;
  // The location of every chunk of `version` (0 where none is readable) and
  // its expiry; false if the key is not indexed at that version.
  bool version_locations(std::string_view key, uint64_t key_hash, uint64_t version,
                         std::vector<uint64_t>* locations, int64_t* expire_at_ms) const;
  std::optional<FlashObjectSummary> summary(std::string_view key, uint64_t key_hash) const;
  // True if chunks 0..chunk_count-1 of `version` are all indexed and readable.
  bool has_chunks(std::string_view key, uint64_t key_hash, uint64_t version,
                  uint32_t chunk_count) const;
  // Sets the expiry of the indexed object if it is at `version`.
  bool set_expiry(std::string_view key, uint64_t key_hash, uint64_t version, int64_t expire_at_ms);
  bool remove(std::string_view key, uint64_t key_hash);
  // Drops the object if its indexed version is <= max_version.
  bool remove_up_to(std::string_view key, uint64_t key_hash, uint64_t max_version);
  // Drops one chunk if it is still at `location` (e.g. it failed to verify).
  bool drop_chunk(std::string_view key, uint64_t key_hash, uint32_t chunk_index, uint64_t location);

  // Drops every chunk stored in `region`, except those being relocated: the
  // reinsertion that marked them settles them (relocate() or drop_chunk()),
  // and until then they are not read. Returns the number dropped.
  // Walks the whole index: O(objects indexed), not O(objects in the region).
  size_t drop_region(uint32_t region);
  // The same, for the chunks `residents` lists (mark_for_reinsertion's
  // list of the region): each is dropped if its entry still points at the
  // listed place and is not being relocated. O(residents). Equal to
  // drop_region() as long as no chunk came to point into the region after
  // the list was made (the region was written whole by then; a staged
  // object that lands later must spoil the list: FlashTier's job).
  size_t drop_listed(uint32_t region, std::span<const RegionResident> residents);
  // Chunks in `region` not being relocated (a full walk: for checks).
  size_t count_in_region(uint32_t region) const;
  // Reinsertion, before `region` is reclaimed: the chunks in it read since
  // they were placed are marked relocating (unreadable) and appended to
  // `hits`; relocate() or drop_chunk() settles each. Every chunk in the
  // region is counted in `yield`, and listed in `residents` if given.
  // Nothing is dropped. Returns the number of chunks marked.
  size_t mark_for_reinsertion(uint32_t region, std::vector<ReinsertCandidate>& hits,
                              RegionYield& yield, std::vector<RegionResident>* residents = nullptr);
  // The same walk without reinsertion: lists every chunk in `region` not
  // being relocated, and marks nothing.
  void list_region(uint32_t region, std::vector<RegionResident>& residents);
  // Either of the two (with `hits`: mark_for_reinsertion) by the records a
  // parse of the region found, not by a walk: O(records), one lookup each.
  // A chunk is the region's if its entry points at its record's place. The
  // same as the walk as long as `records` holds every chunk record of the
  // region's incarnation (a parse that dropped none). Returns the number
  // of chunks marked.
  size_t mark_records(uint32_t region, std::span<const ParsedRecord> records,
                      std::vector<ReinsertCandidate>* hits, RegionYield* yield,
                      std::vector<RegionResident>& residents);
  // Ends a relocation that will not copy the chunk: it is readable at `loc`
  // again, until its region is reclaimed. False if it was settled meanwhile.
  bool keep_in_place(std::string_view key, uint64_t key_hash, uint32_t chunk_index, uint64_t loc);
  // A relocating chunk's expiry now, if it is still indexed and relocating
  // at `version` (not removed, superseded or dropped meanwhile).
  std::optional<int64_t> relocating_expiry(std::string_view key, uint64_t key_hash,
                                           uint32_t chunk_index, uint64_t version) const;
  // Completes a reinsertion: points a relocating chunk at its new place,
  // marked as a copy.
  // False if the chunk was removed or superseded meanwhile.
  bool relocate(std::string_view key, uint64_t key_hash, uint32_t chunk_index, uint64_t version,
                uint64_t new_location);

  // Visits every keyed entry, a shard at a time under its lock (for the
  // snapshot of a clean shutdown: nothing else runs then). Locations
  // without flags.
  void for_each_entry(const std::function<void(const EntryImage&)>& fn) const;
  // Puts back an entry from a snapshot.
  void restore(const EntryImage& image);
  // The compact entries as a snapshot holds them: each bucket's packed
  // bytes, then every expiry (by ident). Reinsertion marks are kept;
  // relocating entries (none at a clean shutdown) would load readable.
  uint32_t compact_bucket_bits() const { return bucket_bits_; }
  void for_each_compact_bucket(const std::function<void(uint32_t shard, uint64_t bucket,
                                                        std::span<const uint8_t>)>& fn) const;
  // False (nothing changed) if the bytes are not a valid bucket image.
  bool restore_compact_bucket(uint32_t shard, uint64_t bucket, std::span<const uint8_t> bytes);
  // The same, for `count` entries that fill(dst, bytes) writes.
  bool restore_compact_bucket(uint32_t shard, uint64_t bucket, uint32_t count,
                              absl::FunctionRef<bool(uint8_t*, size_t)> fill);
  void for_each_compact_expiry(const std::function<void(uint64_t ident, int64_t)>& fn) const;
  // False unless a compact entry of that ident is indexed.
  bool restore_compact_expiry(uint64_t ident, int64_t expire_at_ms);
  // Replaces the object's entry with `image` in one step, so a reader sees
  // the old version or the whole new one; false (nothing changed) if the
  // indexed version is the same or newer.
  bool install(const EntryImage& image, uint64_t key_hash);

  uint32_t shard_count() const { return shard_count_; }
  std::vector<std::string> keys_in_shard(uint32_t shard) const;
  // Keys whose hash is at least `from`, in hash order (the order SCAN
  // walks), `max` of them (0 counts as 1; more only if keys are added
  // meanwhile). *next is the hash to go on from, or 0 once the walk passed
  // the last key. Each shard is read for at most `max` hashes and keys are
  // copied only for the page, so one call's work is bounded whatever the
  // index holds.
  std::vector<std::string> keys_from(uint64_t from, size_t max, uint64_t* next) const;
  // A key of a random object (a random non-empty shard, then a random object
  // in it: uniform up to shard size differences). `seed` picks both.
  std::optional<std::string> random_key(uint64_t seed) const;

  uint64_t object_count() const;
  uint64_t compact_count() const;  // of object_count()
  uint64_t chunk_count() const;
  uint64_t max_version() const;
  // DRAM used by the index: table slots and control bytes, plus heap blocks.
  size_t memory_bytes() const;
  void clear();

 private:
  struct Entry {
    uint64_t version = 0;
    uint64_t object_size = 0;
    int64_t expire_at_ms = 0;
    uint32_t key_length = 0;
    uint32_t slots = 0;
    uint32_t resident = 0;
    uint32_t sample_pos = 0;            // its hash's place in Shard::sample
    std::unique_ptr<uint64_t[]> block;  // slots locations, then the key
    std::string_view key() const;
    uint64_t* locations() { return block.get(); }
  };
  struct Shard {
    explicit Shard(unsigned bucket_bits) : compact(bucket_bits) {}
    mutable Mutex mu;
    absl::flat_hash_map<uint64_t, Entry> map ABSL_GUARDED_BY(mu);
    // every key hash in map, for random_key
    std::vector<uint64_t> sample ABSL_GUARDED_BY(mu);
    // the same, in order, for keys_from
    absl::btree_set<uint64_t> ordered ABSL_GUARDED_BY(mu);
    size_t block_bytes ABSL_GUARDED_BY(mu) = 0;
    uint64_t chunks ABSL_GUARDED_BY(mu) = 0;
    uint64_t max_version ABSL_GUARDED_BY(mu) = 0;
    CompactTable compact ABSL_GUARDED_BY(mu);
    // the expiry of each compact entry that has one, by ident
    absl::flat_hash_map<uint64_t, int64_t> compact_expiry ABSL_GUARDED_BY(mu);
  };

  Shard& shard_for(uint64_t key_hash) const { return *shards_[key_hash & (shard_count_ - 1)]; }
  uint64_t compact_ident(uint64_t key_hash) const { return key_hash & compact_mask_; }
  // The entry of `key_hash` (second: it was just made, empty).
  static std::pair<Entry*, bool> find_or_insert(Shard& s, uint64_t key_hash)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // The keyed entry of `key`, or null.
  static Entry* keyed(Shard& s, std::string_view key, uint64_t key_hash)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  static size_t block_bytes(uint32_t slots, uint32_t key_length);
  static void resize_block(Shard& s, Entry& e, uint32_t slots) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  static void reset_entry(Shard& s, Entry& e, std::string_view key, uint64_t version,
                          uint64_t object_size, uint32_t slots) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  static void erase_chunk(Shard& s, Entry& e, uint32_t chunk_index)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Erases the entry at `it` (block, sample slot, counts).
  static void erase_entry(Shard& s, absl::flat_hash_map<uint64_t, Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Erases the keyed entry of `key`, if any.
  static void erase_keyed(Shard& s, std::string_view key, uint64_t key_hash)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

  // Compact entries. `key_hash` may be a full hash or an ident.
  bool add_compact(Shard& s, std::string_view key, uint64_t key_hash, uint64_t version,
                   uint64_t object_size, uint64_t loc, int64_t expire_at_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Turns a compact entry into a keyed one of `slots` slots (a chunk of its
  // version beyond the first came in).
  void widen_compact(Shard& s, std::string_view key, uint64_t key_hash,
                     const CompactTable::Entry& c, uint32_t slots)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  int64_t compact_expiry(const Shard& s, uint64_t key_hash, const CompactTable::Entry& c) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  void set_compact_expiry(Shard& s, uint64_t key_hash, CompactTable::Entry& c, int64_t expire_at_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  void erase_compact(Shard& s, uint64_t key_hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Both walks of a region: with `hits`, marks the chunks read since placed
  // (mark_for_reinsertion); each output is optional.
  void walk_region(uint32_t region, std::vector<ReinsertCandidate>* hits, RegionYield* yield,
                   std::vector<RegionResident>* residents);
  // walk_region's step for slot `c` of a keyed entry, in the region and
  // not relocating.
  static void mark_slot(uint64_t key_hash, Entry& e, uint32_t c,
                        std::vector<ReinsertCandidate>* hits, RegionYield* yield,
                        std::vector<RegionResident>* residents);
  // walk_region's step for one compact entry (`id`: ident | shard).
  void mark_compact(Shard& s, uint64_t id, CompactTable::Entry& c, uint32_t region,
                    std::vector<ReinsertCandidate>* hits, RegionYield* yield,
                    std::vector<RegionResident>* residents) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Compact buckets a reinsertion walk visits per hold of a shard's lock.
  static constexpr uint64_t kWalkSliceBuckets = 1024;
  // Reads the keys at `locations` (no lock held); a key that cannot be read
  // is looked up again by its ident once, in case it moved.
  std::vector<std::string> read_keys(const std::vector<std::pair<uint64_t, uint64_t>>& named) const;

  const uint32_t shard_count_;
  const unsigned bucket_bits_;
  const uint64_t compact_mask_;  // a compact ident's bits, shard bits included
  const uint64_t hash_mask_;
  std::vector<std::unique_ptr<Shard>> shards_;
  KeyReader key_reader_;
};

}  // namespace tierkv::flash
