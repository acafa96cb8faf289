// Static linking only: exposes XXH3_state_t so the state can live on the stack.
#define XXH_STATIC_LINKING_ONLY
#include "flash/record.h"

#include <xxhash.h>
// The runtime-dispatched (AVX2/AVX-512 where the CPU has them) entry points
// of Debian's libxxhash: 2.4x the throughput of the default SSE2 build on
// 1 MiB records, same hash values. Called by name, not via its macros.
#if defined(__x86_64__)
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>
#define TIERKV_XXH3_UPDATE XXH3_64bits_update_dispatch
#else
#define TIERKV_XXH3_UPDATE XXH3_64bits_update
#endif

#include <algorithm>
#include <cstring>

#include "core/aligned_buffer.h"

namespace tierkv::flash {
namespace {

// The seal (the device's secret salt and the record's offset) is hashed
// last: it binds the record to the device and to its place on it. Last, so
// that the hashed stream lines up with the record's bytes: XXH3 then reads
// the data from the buffer at cache-line-aligned addresses (a 16-byte prefix
// cost 12-27 % more CPU per 1 MiB read).
uint64_t record_checksum(RecordHeader header, std::string_view key, std::string_view data,
                         RecordSeal seal) {
  header.checksum = 0;
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, &header, sizeof(header));
  XXH3_64bits_update(&state, key.data(), key.size());
  TIERKV_XXH3_UPDATE(&state, data.data(), data.size());
  XXH3_64bits_update(&state, &seal, sizeof(seal));
  return XXH3_64bits_digest(&state);
}

uint64_t region_checksum(RegionHeader header, uint64_t salt) {
  header.checksum = 0;
  return XXH3_64bits_withSeed(&header, sizeof(header), salt);
}

uint64_t superblock_checksum(Superblock sb) {
  sb.checksum = 0;
  return XXH3_64bits(&sb, sizeof(sb));
}

// What no writer produces: rejected even when the checksum matches.
const char* implausible(const RecordHeader& h) {
  if (h.flags & ~(kRecordTombstone | kRecordExpiry)) return "unknown record flags";
  if (h.key_length == 0) return "record without a key";
  if (h.object_version == 0 || h.object_version >= kMaxObjectVersion)
    return "implausible record version";
  if (h.chunk_count != 0 && h.chunk_index >= h.chunk_count) return "chunk index past the count";
  return nullptr;
}

}  // namespace

uint64_t record_size(uint64_t key_length, uint64_t data_length) {
  return align_up(sizeof(RecordHeader) + key_length + data_length, kRecordAlign);
}

uint64_t encode_record(char* dst, std::string_view key, std::string_view data,
                       const RecordFields& fields, RecordSeal seal) {
  RecordHeader h;
  h.flags = fields.flags;
  h.key_length = static_cast<uint32_t>(key.size());
  h.chunk_index = fields.chunk_index;
  h.object_version = fields.object_version;
  h.region_seq = fields.region_seq;
  h.object_size = fields.object_size;
  h.data_length = static_cast<uint32_t>(data.size());
  h.chunk_count = fields.chunk_count;
  h.expire_at_ms = fields.expire_at_ms;
  h.checksum = record_checksum(h, key, data, seal);
  std::memcpy(dst, &h, sizeof(h));
  // memcpy from a null view (empty data) is undefined even for 0 bytes.
  if (!key.empty()) std::memcpy(dst + sizeof(h), key.data(), key.size());
  if (!data.empty()) std::memcpy(dst + sizeof(h) + key.size(), data.data(), data.size());
  const uint64_t used = sizeof(h) + key.size() + data.size();
  const uint64_t total = record_size(key.size(), data.size());
  std::memset(dst + used, 0, total - used);
  return total;
}

bool is_record_start(const char* buf, uint64_t len, uint64_t region_seq) {
  if (len < sizeof(RecordHeader)) return false;
  RecordHeader h;
  std::memcpy(&h, buf, sizeof(h));
  return h.magic == kRecordMagic && h.format_version == kFormatVersion &&
         h.region_seq == region_seq;
}

Result<RecordView> decode_record(const char* buf, uint64_t len, RecordSeal seal) {
  if (len < sizeof(RecordHeader)) return Status::corruption("record shorter than its header");
  RecordView view;
  RecordHeader& h = view.header;
  std::memcpy(&h, buf, sizeof(h));
  if (h.magic != kRecordMagic) return Status::corruption("bad record magic");
  if (h.format_version != kFormatVersion) return Status::corruption("unknown record format");
  if (const char* why = implausible(h)) return Status::corruption(why);
  const uint64_t body = uint64_t{h.key_length} + h.data_length;
  if (body > len - sizeof(RecordHeader)) return Status::corruption("record runs past its extent");
  view.key = std::string_view(buf + sizeof(h), h.key_length);
  view.data = std::string_view(buf + sizeof(h) + h.key_length, h.data_length);
  if (record_checksum(h, view.key, view.data, seal) != h.checksum) {
    return Status::corruption("record checksum mismatch");
  }
  return view;
}

void encode_region_header(char* dst, uint32_t region_index, uint64_t seq, uint64_t region_size,
                          uint64_t salt, uint16_t flags) {
  RegionHeader h;
  h.flags = flags;
  h.region_index = region_index;
  h.seq = seq;
  h.region_size = region_size;
  h.checksum = region_checksum(h, salt);
  std::memset(dst, 0, kBlockSize);
  std::memcpy(dst, &h, sizeof(h));
}

Result<RegionHeader> decode_region_header(const char* buf, uint64_t len, uint64_t salt) {
  if (len < sizeof(RegionHeader)) return Status::corruption("region header truncated");
  RegionHeader h;
  std::memcpy(&h, buf, sizeof(h));
  if (h.magic != kRegionMagic) return Status::corruption("no region header");
  if (h.format_version != kFormatVersion) return Status::corruption("unknown region format");
  if (region_checksum(h, salt) != h.checksum) return Status::corruption("region header checksum");
  return h;
}

namespace {
uint64_t snapshot_area(uint64_t region_space, double fraction) {
  const auto share = static_cast<uint64_t>(static_cast<double>(region_space) * fraction);
  return align_up(std::max<uint64_t>(uint64_t{1} << 20, share));
}
}  // namespace

uint64_t layout_size(uint64_t regions, uint64_t region_size, double snapshot_fraction) {
  return kDataStart + regions * region_size +
         snapshot_area(regions * region_size, snapshot_fraction);
}

Layout plan_layout(uint64_t size, uint64_t region_size, double snapshot_fraction) {
  Layout l;
  if (size <= kDataStart || region_size == 0) return l;
  uint64_t regions = (size - kDataStart) / region_size;
  while (regions > 0 && layout_size(regions, region_size, snapshot_fraction) > size) --regions;
  l.regions = regions;
  l.snapshot_offset = kDataStart + regions * region_size;
  l.snapshot_bytes = snapshot_area(regions * region_size, snapshot_fraction);
  l.total = l.snapshot_offset + l.snapshot_bytes;
  return l;
}

void encode_superblock(char* dst, const Superblock& sb) {
  Superblock out = sb;
  out.magic = kSuperMagic;
  out.format_version = kFormatVersion;
  out.checksum = superblock_checksum(out);
  std::memset(dst, 0, kBlockSize);
  std::memcpy(dst, &out, sizeof(out));
}

Result<Superblock> decode_superblock(const char* buf, uint64_t len) {
  if (len < sizeof(Superblock)) return Status::corruption("superblock truncated");
  Superblock sb;
  std::memcpy(&sb, buf, sizeof(sb));
  if (sb.magic != kSuperMagic) return Status::corruption("no superblock");
  if (sb.format_version != kFormatVersion) return Status::corruption("unknown superblock format");
  if (superblock_checksum(sb) != sb.checksum) return Status::corruption("superblock checksum");
  return sb;
}

}  // namespace tierkv::flash
