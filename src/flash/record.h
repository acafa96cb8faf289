// On-flash formats: record and region headers.
//
// A region starts with one block holding a RegionHeader; records follow,
// each padded to a whole block:
//
//   RecordHeader (64 B) | key | data | zero padding to 4 KiB
//
// The checksum (xxh3-64) covers the header (with its checksum field zeroed),
// the key and the data, so any flipped byte in them is detected. Every record
// carries the sequence number of the region incarnation it was written in:
// after a region is reclaimed and rewritten, records left over from its
// previous life no longer match and are skipped by recovery.
//
// Integers are stored in host (little-endian) byte order. Format 2 added the
// expiry field and the expiry record; format-1 files are not read (their
// region headers are rejected, so recovery starts with those regions free).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace tierkv::flash {

inline constexpr uint32_t kRecordMagic = 0x52564B54;  // "TKVR"
inline constexpr uint32_t kRegionMagic = 0x47564B54;  // "TKVG"
inline constexpr uint16_t kFormatVersion = 2;
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
  uint32_t reserved = 0;
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

// What a record says about itself, besides its bytes.
struct RecordFields {
  uint32_t chunk_index = 0;
  uint64_t object_version = 0;
  uint64_t region_seq = 0;
  uint64_t object_size = 0;
  uint16_t flags = 0;
  int64_t expire_at_ms = 0;
};

struct RecordView {
  RecordHeader header;
  std::string_view key;
  std::string_view data;  // points into the decoded buffer
};

// Bytes a record occupies on flash: header + key + data, padded to 4 KiB.
uint64_t record_size(uint64_t key_length, uint64_t data_length);
// Header + key + data, unpadded: the bytes a read must cover.
inline uint64_t record_length(uint64_t key_length, uint64_t data_length) {
  return sizeof(RecordHeader) + key_length + data_length;
}

// Writes one record at dst (which must hold record_size() bytes, padding
// included); returns the padded size.
uint64_t encode_record(char* dst, std::string_view key, std::string_view data,
                       const RecordFields& fields);

// True if buf starts with a record header of this format written in region
// incarnation `region_seq` (the checksum is not checked yet).
bool is_record_start(const char* buf, uint64_t len, uint64_t region_seq);

// Parses and verifies the record at buf. Corruption if the header is
// malformed, the lengths run past `len`, or the checksum does not match.
Result<RecordView> decode_record(const char* buf, uint64_t len);

void encode_region_header(char* dst, uint32_t region_index, uint64_t seq, uint64_t region_size,
                          uint16_t flags = 0);
// Corruption unless buf holds a valid region header (magic, version, checksum).
Result<RegionHeader> decode_region_header(const char* buf, uint64_t len);

}  // namespace tierkv::flash
