#include "flash/record.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "core/aligned_buffer.h"

namespace tierkv::flash {
namespace {

constexpr RecordSeal kSeal{0x5eed5a17c0ffee00ull, 3 * kBlockSize};
constexpr uint64_t kSalt = kSeal.salt;

// The snapshot area takes its share of the region space (at least 1 MiB),
// and the regions take the rest.
TEST(RecordTest, LayoutGivesTheSnapshotItsShare) {
  const uint64_t size = uint64_t{1} << 32, region = uint64_t{16} << 20;
  for (double share : {kDefaultSnapshotFraction, 0.08, 0.5}) {
    const Layout l = plan_layout(size, region, share);
    const double space = static_cast<double>(l.regions * region);
    EXPECT_GE(static_cast<double>(l.snapshot_bytes), space * share) << share;
    EXPECT_LE(l.total, size);
    EXPECT_GT(layout_size(l.regions + 1, region, share), size) << "a region more would fit";
    EXPECT_EQ(l.snapshot_offset, kDataStart + l.regions * region);
  }
  EXPECT_GT(plan_layout(size, region).regions, plan_layout(size, region, 0.08).regions);
  EXPECT_EQ(plan_layout(uint64_t{8} << 20, 1 << 20, 0.001).snapshot_bytes, uint64_t{1} << 20);
}

TEST(RecordTest, RoundTripKeepsEveryField) {
  const std::string key = "model/layer-7/kv";
  const std::string data(10'000, 'x');
  AlignedBuffer buf(record_size(key.size(), data.size()));
  const uint64_t size = encode_record(buf.data(), key, data, {3, 42, 7, 123456}, kSeal);
  EXPECT_EQ(size, 10080u);  // 64 + 16 + 10000, a multiple of 16
  EXPECT_TRUE(is_record_start(buf.data(), size, 7));
  EXPECT_FALSE(is_record_start(buf.data(), size, 8));
  Result<RecordView> r = decode_record(buf.data(), size, kSeal);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->key, key);
  EXPECT_EQ(r->data, data);
  EXPECT_EQ(r->header.chunk_index, 3u);
  EXPECT_EQ(r->header.object_version, 42u);
  EXPECT_EQ(r->header.region_seq, 7u);
  EXPECT_EQ(r->header.object_size, 123456u);
}

TEST(RecordTest, FormatThreeCarriesExpiryChunkCountAndMetaFlags) {
  static_assert(sizeof(RecordHeader) == 64);
  EXPECT_EQ(kFormatVersion, 3);
  AlignedBuffer buf(kBlockSize);
  const int64_t expire = 1'900'000'000'123;
  encode_record(buf.data(), "k", "", {0, 8, 3, 0, kRecordExpiry, expire}, kSeal);
  Result<RecordView> r = decode_record(buf.data(), kBlockSize, kSeal);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->header.expire_at_ms, expire);
  EXPECT_EQ(r->header.flags, kRecordExpiry);
  EXPECT_EQ(r->header.object_version, 8u);
  EXPECT_EQ(r->header.format_version, 3);
  encode_record(buf.data(), "k", "data", {2, 9, 3, 4, 0, 0, 5}, kSeal);
  EXPECT_EQ(decode_record(buf.data(), kBlockSize, kSeal)->header.chunk_count, 5u);

  // A data record keeps its expiry too, and 0 means none.
  encode_record(buf.data(), "k", "data", {1, 9, 3, 4, 0, -1}, kSeal);
  EXPECT_EQ(decode_record(buf.data(), kBlockSize, kSeal)->header.expire_at_ms, -1);
  encode_record(buf.data(), "k", "data", {1, 9, 3, 4}, kSeal);
  EXPECT_EQ(decode_record(buf.data(), kBlockSize, kSeal)->header.expire_at_ms, 0);
}

// A record stamped with an older format is not read, however its checksum looks.
TEST(RecordTest, OlderFormatRecordsAndRegionsAreRejected) {
  AlignedBuffer buf(kBlockSize);
  encode_record(buf.data(), "k", "data", {0, 1, 7, 4}, kSeal);
  RecordHeader h;
  std::memcpy(&h, buf.data(), sizeof(h));
  h.format_version = 1;
  std::memcpy(buf.data(), &h, sizeof(h));
  EXPECT_FALSE(is_record_start(buf.data(), kBlockSize, 7));
  Result<RecordView> r = decode_record(buf.data(), kBlockSize, kSeal);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);

  encode_region_header(buf.data(), 0, 1, 4 << 20, kSalt);
  RegionHeader rh;
  std::memcpy(&rh, buf.data(), sizeof(rh));
  rh.format_version = 1;
  std::memcpy(buf.data(), &rh, sizeof(rh));
  EXPECT_FALSE(decode_region_header(buf.data(), kBlockSize, kSalt).is_ok());
}

TEST(RecordTest, RegionHeaderKeepsTheFreeFlag) {
  AlignedBuffer buf(kBlockSize);
  encode_region_header(buf.data(), 2, 40, 4 << 20, kSalt, kRegionFree);
  Result<RegionHeader> h = decode_region_header(buf.data(), kBlockSize, kSalt);
  ASSERT_TRUE(h.is_ok());
  EXPECT_EQ(h->flags, kRegionFree);
  EXPECT_EQ(h->seq, 40u);
}

TEST(RecordTest, EmptyDataRoundTrips) {
  AlignedBuffer buf(kBlockSize);
  encode_record(buf.data(), "k", "", {0, 1, 1, 0}, kSeal);
  Result<RecordView> r = decode_record(buf.data(), kBlockSize, kSeal);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->data.size(), 0u);
}

// Every byte of header, key and data is covered: flipping any one of them
// must make the record undecodable.
TEST(RecordTest, EverySingleFlippedByteIsRejected) {
  const std::string key = "flip-key";
  const std::string data = "the quick brown fox jumps over the lazy dog, 0123456789";
  AlignedBuffer buf(record_size(key.size(), data.size()));
  const uint64_t size = encode_record(buf.data(), key, data, {1, 2, 3, 4}, kSeal);
  const size_t covered = sizeof(RecordHeader) + key.size() + data.size();
  for (size_t i = 0; i < covered; ++i) {
    for (uint8_t mask : {0x01, 0x80, 0xff}) {
      buf.data()[i] ^= static_cast<char>(mask);
      EXPECT_FALSE(decode_record(buf.data(), size, kSeal).is_ok())
          << "byte " << i << " mask " << +mask;
      buf.data()[i] ^= static_cast<char>(mask);
    }
  }
  EXPECT_TRUE(decode_record(buf.data(), size, kSeal).is_ok());
}

TEST(RecordTest, LengthsPastTheExtentAreRejected) {
  AlignedBuffer buf(2 * kBlockSize);
  const std::string data(5000, 'd');
  encode_record(buf.data(), "k", data, {0, 1, 1, 0}, kSeal);
  EXPECT_FALSE(decode_record(buf.data(), kBlockSize, kSeal).is_ok());  // torn: second block missing
  EXPECT_FALSE(decode_record(buf.data(), 20, kSeal).is_ok());
  EXPECT_TRUE(decode_record(buf.data(), 2 * kBlockSize, kSeal).is_ok());
}

TEST(RecordTest, RegionHeaderRoundTripAndFlips) {
  AlignedBuffer buf(kBlockSize);
  encode_region_header(buf.data(), 5, 99, 4 << 20, kSalt);
  Result<RegionHeader> h = decode_region_header(buf.data(), kBlockSize, kSalt);
  ASSERT_TRUE(h.is_ok());
  EXPECT_EQ(h->region_index, 5u);
  EXPECT_EQ(h->seq, 99u);
  EXPECT_EQ(h->region_size, 4u << 20);
  for (size_t i = 0; i < sizeof(RegionHeader); ++i) {
    buf.data()[i] ^= 0x10;
    EXPECT_FALSE(decode_region_header(buf.data(), kBlockSize, kSalt).is_ok()) << "byte " << i;
    buf.data()[i] ^= 0x10;
  }
}

// Finding 7 of the trust issue: bytes a client stores as a value must never
// pass for a record. The checksum is seeded with the device's secret salt
// and the record's place: a record image is valid only on its own device,
// at its own offset, and value bytes shaped like a header (right magic,
// format, seq; checksum computed without the salt) are rejected.
TEST(RecordTest, ChecksumIsBoundToTheSaltAndThePlace) {
  const std::string key = "k";
  const std::string data(300, 'v');
  AlignedBuffer buf(kBlockSize);
  encode_record(buf.data(), key, data, {0, 7, 3, 300, 0, 0, 1}, kSeal);
  EXPECT_TRUE(decode_record(buf.data(), kBlockSize, kSeal).is_ok());
  EXPECT_FALSE(
      decode_record(buf.data(), kBlockSize, {kSeal.salt + 1, kSeal.device_offset}).is_ok());
  EXPECT_FALSE(decode_record(buf.data(), kBlockSize, {kSeal.salt, kSeal.device_offset + kBlockSize})
                   .is_ok());
  // What a client could build without the salt: an unseeded checksum.
  encode_record(buf.data(), key, data, {0, 7, 3, 300, 0, 0, 1}, {0, 0});
  EXPECT_TRUE(is_record_start(buf.data(), kBlockSize, 3));
  EXPECT_FALSE(decode_record(buf.data(), kBlockSize, kSeal).is_ok());
}

TEST(RecordTest, ImplausibleHeadersAreRejectedEvenWithAGoodChecksum) {
  AlignedBuffer buf(kBlockSize);
  encode_record(buf.data(), "k", "d", {0, kMaxObjectVersion, 3, 1}, kSeal);
  EXPECT_FALSE(decode_record(buf.data(), kBlockSize, kSeal).is_ok());
  encode_record(buf.data(), "k", "d", {0, 0, 3, 1}, kSeal);
  EXPECT_FALSE(decode_record(buf.data(), kBlockSize, kSeal).is_ok());
  encode_record(buf.data(), "k", "d", {4, 9, 3, 1, 0, 0, 4}, kSeal);  // chunk 4 of 4
  EXPECT_FALSE(decode_record(buf.data(), kBlockSize, kSeal).is_ok());
  encode_record(buf.data(), "k", "d", {0, 9, 3, 1, 8}, kSeal);  // unknown flag
  EXPECT_FALSE(decode_record(buf.data(), kBlockSize, kSeal).is_ok());
  encode_record(buf.data(), "k", "d", {3, 9, 3, 1, 0, 0, 4}, kSeal);
  EXPECT_TRUE(decode_record(buf.data(), kBlockSize, kSeal).is_ok());
}

TEST(RecordTest, RegionHeaderNeedsTheSalt) {
  AlignedBuffer buf(kBlockSize);
  encode_region_header(buf.data(), 1, 5, 4 << 20, kSalt);
  EXPECT_TRUE(decode_region_header(buf.data(), kBlockSize, kSalt).is_ok());
  EXPECT_FALSE(decode_region_header(buf.data(), kBlockSize, kSalt ^ 1).is_ok());
}

TEST(RecordTest, SuperblockRoundTripAndFlips) {
  AlignedBuffer buf(kBlockSize);
  Superblock sb;
  sb.salt = kSalt;
  sb.generation = 7;
  sb.region_size = 4 << 20;
  sb.region_count = 12;
  sb.seq_limit = 4096;
  encode_superblock(buf.data(), sb);
  Result<Superblock> back = decode_superblock(buf.data(), kBlockSize);
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->salt, kSalt);
  EXPECT_EQ(back->generation, 7u);
  EXPECT_EQ(back->seq_limit, 4096u);
  EXPECT_EQ(back->region_count, 12u);
  for (size_t i = 0; i < sizeof(Superblock); ++i) {
    buf.data()[i] ^= 0x04;
    EXPECT_FALSE(decode_superblock(buf.data(), kBlockSize).is_ok()) << "byte " << i;
    buf.data()[i] ^= 0x04;
  }
}

}  // namespace
}  // namespace tierkv::flash
