// On-flash formats: superblock, region and record headers.
//
// The device starts with two superblock slots (4 KiB each, written
// alternately so a torn update leaves the other); regions follow. A region
// starts with one block holding a RegionHeader; records follow, each padded
// to kRecordAlign:
//
//   RecordHeader (64 B) | key | data | zero padding to 16 B
//
// A record that would cross a 4 KiB block boundary starts the next block
// instead, and a write batch ends with zeros up to a block boundary; small
// records share blocks, and a record of up to 4 KiB is read with one block.
// (Devices written before packing hold one record per block at most; they
// read the same way.)
// The checksum (xxh3-64) covers the header (with its checksum field zeroed),
// the key and the data, so any flipped byte in them is detected. It is
// seeded with the device's secret salt (random, kept in the superblock) mixed
// with the record's own device offset: bytes a client stored as a value can
// never pass for a record (they would need the salt), and a genuine record
// image is valid only where it was written. Every record also carries the
// sequence number of the region incarnation it was written in: after a
// region is reclaimed and rewritten, records left over from its previous
// life no longer match and are skipped by recovery.
//
// Integers are stored in host (little-endian) byte order. Format 3 added the
// superblock, the salted checksums and the chunk count; files of older
// formats are not read (no superblock: the device starts empty).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace tierkv::flash {

inline constexpr uint32_t kRecordMagic = 0x52564B54;  // "TKVR"
inline constexpr uint32_t kRegionMagic = 0x47564B54;  // "TKVG"
inline constexpr uint32_t kSuperMagic = 0x53564B54;   // "TKVS"
inline constexpr uint16_t kFormatVersion = 3;
// Records start at multiples of this inside their region.
inline constexpr uint64_t kRecordAlign = 16;
// Two superblock slots, then the regions.
inline constexpr uint64_t kSuperblockSlots = 2;
inline constexpr uint64_t kDataStart = kSuperblockSlots * 4096;
// Versions are handed out from 1 upward; a record claiming more is corrupt.
inline constexpr uint64_t kMaxObjectVersion = uint64_t{1} << 56;
// A tombstone (no data) marks every version <= its own of its key removed.
inline constexpr uint16_t kRecordTombstone = 1;
// An expiry record (no data) sets the expiry of its key's version to the
// header's expire_at_ms; later records (log order) win.
inline constexpr uint16_t kRecordExpiry = 2;
// A region header with this flag marks the region free: it holds nothing,
// but its seq still counts, so a later incarnation gets a higher one.
inline constexpr uint16_t kRegionFree = 1;

struct RecordHeader {
  uint32_t magic = kRecordMagic;
  uint16_t format_version = kFormatVersion;
  uint16_t flags = 0;  // kRecordTombstone, or 0
  uint32_t key_length = 0;
  uint32_t chunk_index = 0;
  uint64_t object_version = 0;
  uint64_t region_seq = 0;
  uint64_t object_size = 0;  // whole object's size; 0 if the writer did not say
  uint32_t data_length = 0;
  uint32_t chunk_count = 0;  // chunks of the whole object; 0 if the writer did not say
  int64_t expire_at_ms = 0;  // unix ms; 0: no expiry
  uint64_t checksum = 0;
};
static_assert(sizeof(RecordHeader) == 64);

struct RegionHeader {
  uint32_t magic = kRegionMagic;
  uint16_t format_version = kFormatVersion;
  uint16_t flags = 0;  // kRegionFree, or 0
  uint32_t region_index = 0;
  uint32_t reserved2 = 0;
  uint64_t seq = 0;
  uint64_t region_size = 0;
  uint64_t checksum = 0;
};
static_assert(sizeof(RegionHeader) == 40);

// Device-wide state, rewritten rarely: the checksum salt, the layout, and
// the region sequence numbers reserved so far (every seq handed out is below
// seq_limit, so a restart after a crash never reuses one).
struct Superblock {
  uint32_t magic = kSuperMagic;
  uint16_t format_version = kFormatVersion;
  uint16_t reserved = 0;
  uint32_t region_count = 0;
  uint32_t reserved2 = 0;
  uint64_t salt = 0;
  uint64_t generation = 0;  // bumped on every rewrite; the higher valid slot wins
  uint64_t region_size = 0;
  uint64_t seq_limit = 0;
  // The index snapshot of the last clean shutdown (0: none, or used up:
  // the first start after it clears this before writing anything).
  uint64_t snapshot_length = 0;
  uint64_t snapshot_checksum = 0;
  uint64_t checksum = 0;
};
static_assert(sizeof(Superblock) == 72);

// The device layout: superblock slots, the regions, then the area that
// holds the index snapshot of a clean shutdown (`snapshot_fraction` of the
// region space, 1/64 unless configured, at least 1 MiB: at 1/64, 21 B of
// compact index per 1.4 KB of regions fits).
inline constexpr double kDefaultSnapshotFraction = 1.0 / 64;
inline constexpr double kMaxSnapshotFraction = 0.5;
struct Layout {
  uint64_t regions = 0;
  uint64_t snapshot_offset = 0;
  uint64_t snapshot_bytes = 0;
  uint64_t total = 0;  // bytes the layout uses
};
// Byte offset of region `region` on the device.
inline uint64_t region_offset(uint32_t region, uint64_t region_size) {
  return kDataStart + uint64_t{region} * region_size;
}
// The most regions of `region_size` that `size` bytes hold.
Layout plan_layout(uint64_t size, uint64_t region_size,
                   double snapshot_fraction = kDefaultSnapshotFraction);
// The smallest size that holds `regions` regions (for tests and tools).
uint64_t layout_size(uint64_t regions, uint64_t region_size,
                     double snapshot_fraction = kDefaultSnapshotFraction);

// Where a record sits and the device's salt: both seed its checksum.
struct RecordSeal {
  uint64_t salt = 0;
  uint64_t device_offset = 0;
};

// What a record says about itself, besides its bytes.
struct RecordFields {
  uint32_t chunk_index = 0;
  uint64_t object_version = 0;
  uint64_t region_seq = 0;
  uint64_t object_size = 0;
  uint16_t flags = 0;
  int64_t expire_at_ms = 0;
  uint32_t chunk_count = 0;
};

struct RecordView {
  RecordHeader header;
  std::string_view key;
  std::string_view data;  // points into the decoded buffer
};

// Bytes a record occupies on flash: header + key + data, padded to
// kRecordAlign.
uint64_t record_size(uint64_t key_length, uint64_t data_length);
// Header + key + data, unpadded: the bytes a read must cover.
inline uint64_t record_length(uint64_t key_length, uint64_t data_length) {
  return sizeof(RecordHeader) + key_length + data_length;
}

// Writes one record at dst (which must hold record_size() bytes, padding
// included); returns the padded size.
uint64_t encode_record(char* dst, std::string_view key, std::string_view data,
                       const RecordFields& fields, RecordSeal seal);

// True if buf starts with a record header of this format written in region
// incarnation `region_seq` (the checksum is not checked yet).
bool is_record_start(const char* buf, uint64_t len, uint64_t region_seq);

// Parses and verifies the record at buf, written at `seal`. Corruption if
// the header is malformed or implausible (version, chunk index), the lengths
// run past `len`, or the checksum does not match.
Result<RecordView> decode_record(const char* buf, uint64_t len, RecordSeal seal);

void encode_region_header(char* dst, uint32_t region_index, uint64_t seq, uint64_t region_size,
                          uint64_t salt, uint16_t flags = 0);
// Corruption unless buf holds a valid region header (magic, version, salted
// checksum).
Result<RegionHeader> decode_region_header(const char* buf, uint64_t len, uint64_t salt);

// Fills one 4 KiB block at dst.
void encode_superblock(char* dst, const Superblock& sb);
// Corruption unless buf holds a valid superblock of this format.
Result<Superblock> decode_superblock(const char* buf, uint64_t len);

}  // namespace tierkv::flash
