// CompactTable: the DRAM index of single-chunk flash objects, 21 bytes each.
//
// An object is named by its key's 64-bit hash, not by its key: the key stays
// on flash, in the object's record. The table keeps the top
// bucket_bits + 40 bits of the hash (its "ident"): the top bucket_bits pick
// a bucket, the next 40 are the entry's tag. A bucket is one heap array of
// packed entries sorted by tag, grown a little at a time, so a table of n
// objects takes about 21 n bytes plus 16 bytes per bucket, whatever n is.
//
// Entry, 21 bytes, little-endian:
//   tag       5 B   hash bits below the bucket bits
//   location  8 B   as FlashIndex packs it, flag bits included
//   word      8 B   bits 0-44 the version (below 2^45: 3.5e13 writes),
//                   bits 45-62 the object size (below 256 KiB), bit 63 set
//                   if it has an expiry
// An object outside those bounds is FlashIndex's to keep in its keyed map,
// where its overhead is small beside 256 KiB.
//
// Two keys whose hashes share their ident are one entry: the later replaces
// the earlier. Whoever reads the object's record compares its key, so a
// shared ident is a miss for one of them, never another key's value.
//
// Not thread-safe: FlashIndex keeps one per shard, under the shard's lock.
#pragma once

#include <absl/functional/function_ref.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace tierkv::flash {

class CompactTable {
 public:
  static constexpr size_t kEntryBytes = 21;
  static constexpr unsigned kTagBits = 40;
  static constexpr uint64_t kMaxSize = (uint64_t{1} << 18) - 1;
  static constexpr uint64_t kMaxVersion = (uint64_t{1} << 45) - 1;
  static constexpr unsigned kMaxBucketBits = 64 - kTagBits;

  struct Entry {
    uint64_t location = 0;
    uint64_t version = 0;
    uint32_t size = 0;
    bool has_expiry = false;
  };
  // An entry and its ident (the hash with the bits the table does not keep
  // cleared).
  struct Named {
    uint64_t ident = 0;
    Entry entry;
  };

  // 2^bucket_bits buckets (at most kMaxBucketBits).
  explicit CompactTable(unsigned bucket_bits);
  ~CompactTable();
  CompactTable(const CompactTable&) = delete;
  CompactTable& operator=(const CompactTable&) = delete;

  static bool fits(uint64_t object_size, uint64_t version) {
    return object_size <= kMaxSize && version <= kMaxVersion;
  }
  // The part of `hash` the table keeps.
  uint64_t ident(uint64_t hash) const { return hash & ident_mask_; }
  static uint64_t ident_mask(unsigned bucket_bits) {
    return ~uint64_t{0} << (64 - std::min(bucket_bits, kMaxBucketBits) - kTagBits);
  }

  std::optional<Entry> find(uint64_t hash) const;
  // Inserts or overwrites; true if inserted.
  bool put(uint64_t hash, const Entry& entry);
  bool erase(uint64_t hash);
  // Calls fn(ident, entry&) for every entry; fn returns false to erase it
  // and may change the entry it keeps. Returns the number erased.
  template <typename Fn>
  size_t filter(Fn&& fn);
  // The same, for the buckets first..end-1 only: a caller may walk the
  // table a slice at a time, releasing its lock between slices (entries
  // never move between buckets).
  template <typename Fn>
  size_t filter_buckets(uint64_t first, uint64_t end, Fn&& fn);

  // Entries whose ident is at least ident(from), in ident order, `max` of
  // them at most (they are appended to *out). Returns the ident to go on
  // from, or 0 once the walk passed the last entry.
  uint64_t walk_from(uint64_t from, size_t max, std::vector<Named>* out) const;
  // The entry at a position chosen by `seed`: a random bucket, then the
  // first non-empty one from there; nullopt if the table is empty.
  std::optional<Named> pick(uint64_t seed) const;

  uint64_t size() const { return size_; }
  // Heap arrays (as the allocator counts them) plus the bucket table.
  size_t memory_bytes() const { return heap_bytes_ + buckets_.size() * sizeof(Bucket); }
  void clear();

  // The snapshot's view: bucket i's packed entries, and putting them back.
  unsigned bucket_bits() const { return bucket_bits_; }
  size_t bucket_count() const { return buckets_.size(); }
  std::span<const uint8_t> bucket_bytes(size_t bucket) const;
  // False (nothing changed) unless `bytes` is whole entries in strictly
  // ascending tag order. Merged into entries already there (the newer
  // version of an ident wins). *max_version: the newest version loaded.
  bool load_bucket(size_t bucket, std::span<const uint8_t> bytes, uint64_t* max_version);
  // The same, with `count` entries that fill(dst, bytes) writes (false: it
  // could not), straight into the bucket's array when it is empty.
  bool load_bucket(size_t bucket, uint32_t count, absl::FunctionRef<bool(uint8_t*, size_t)> fill,
                   uint64_t* max_version);

 private:
  struct Bucket {
    uint8_t* data = nullptr;
    uint32_t count = 0;
    uint32_t capacity = 0;
  };

  uint64_t bucket_of(uint64_t hash) const { return bucket_bits_ == 0 ? 0 : hash >> bucket_shift_; }
  uint64_t tag_of(uint64_t hash) const { return (hash >> tag_shift_) & kTagMask; }
  uint64_t ident_at(uint64_t bucket, uint64_t tag) const;
  // The first position in b whose tag is >= tag.
  static uint32_t lower_bound(const Bucket& b, uint64_t tag);
  static uint64_t tag_at(const Bucket& b, uint32_t pos);
  // True if the entries' tags strictly ascend.
  static bool ascending(const uint8_t* entries, uint32_t count);
  static Entry decode(const uint8_t* p);
  static void encode(uint8_t* p, uint64_t tag, const Entry& e);
  void reserve(Bucket& b, uint32_t capacity);
  void release(Bucket& b);

  static constexpr uint64_t kTagMask = (uint64_t{1} << kTagBits) - 1;
  const unsigned bucket_bits_;
  const unsigned bucket_shift_;  // 64 - bucket_bits
  const unsigned tag_shift_;     // 64 - bucket_bits - kTagBits
  const uint64_t ident_mask_;
  std::vector<Bucket> buckets_;
  uint64_t size_ = 0;
  size_t heap_bytes_ = 0;
};

template <typename Fn>
size_t CompactTable::filter(Fn&& fn) {
  return filter_buckets(0, buckets_.size(), std::forward<Fn>(fn));
}

template <typename Fn>
size_t CompactTable::filter_buckets(uint64_t first, uint64_t end, Fn&& fn) {
  size_t erased = 0;
  for (uint64_t bi = first; bi < std::min<uint64_t>(end, buckets_.size()); ++bi) {
    Bucket& b = buckets_[bi];
    uint32_t kept = 0;
    for (uint32_t i = 0; i < b.count; ++i) {
      const uint8_t* p = b.data + size_t{i} * kEntryBytes;
      const uint64_t tag = tag_at(b, i);
      Entry e = decode(p);
      if (!fn(ident_at(bi, tag), e)) continue;
      encode(b.data + size_t{kept} * kEntryBytes, tag, e);
      ++kept;
    }
    erased += b.count - kept;
    size_ -= b.count - kept;
    b.count = kept;
    if (kept == 0) {
      release(b);
    } else if (b.capacity > kept + kept / 4 + 4) {
      reserve(b, kept + kept / 8);
    }
  }
  return erased;
}

}  // namespace tierkv::flash
