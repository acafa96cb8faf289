#include "flash/record.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "flash/aligned_buffer.h"

namespace tierkv::flash {
namespace {

TEST(RecordTest, RoundTripKeepsEveryField) {
  const std::string key = "model/layer-7/kv";
  const std::string data(10'000, 'x');
  AlignedBuffer buf(record_size(key.size(), data.size()));
  const uint64_t size = encode_record(buf.data(), key, data, {3, 42, 7, 123456});
  EXPECT_EQ(size, 12288u);  // 64 + 16 + 10000 rounded up to 4 KiB
  EXPECT_TRUE(is_record_start(buf.data(), size, 7));
  EXPECT_FALSE(is_record_start(buf.data(), size, 8));
  Result<RecordView> r = decode_record(buf.data(), size);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->key, key);
  EXPECT_EQ(r->data, data);
  EXPECT_EQ(r->header.chunk_index, 3u);
  EXPECT_EQ(r->header.object_version, 42u);
  EXPECT_EQ(r->header.region_seq, 7u);
  EXPECT_EQ(r->header.object_size, 123456u);
}

TEST(RecordTest, FormatTwoCarriesExpiryAndMetaFlags) {
  static_assert(sizeof(RecordHeader) == 64);
  EXPECT_EQ(kFormatVersion, 2);
  AlignedBuffer buf(kBlockSize);
  const int64_t expire = 1'900'000'000'123;
  encode_record(buf.data(), "k", "", {0, 8, 3, 0, kRecordExpiry, expire});
  Result<RecordView> r = decode_record(buf.data(), kBlockSize);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->header.expire_at_ms, expire);
  EXPECT_EQ(r->header.flags, kRecordExpiry);
  EXPECT_EQ(r->header.object_version, 8u);
  EXPECT_EQ(r->header.format_version, 2);

  // A data record keeps its expiry too, and 0 means none.
  encode_record(buf.data(), "k", "data", {1, 9, 3, 4, 0, -1});
  EXPECT_EQ(decode_record(buf.data(), kBlockSize)->header.expire_at_ms, -1);
  encode_record(buf.data(), "k", "data", {1, 9, 3, 4});
  EXPECT_EQ(decode_record(buf.data(), kBlockSize)->header.expire_at_ms, 0);
}

// A record stamped with format 1 is not read, however its checksum looks.
TEST(RecordTest, FormatOneRecordsAndRegionsAreRejected) {
  AlignedBuffer buf(kBlockSize);
  encode_record(buf.data(), "k", "data", {0, 1, 7, 4});
  RecordHeader h;
  std::memcpy(&h, buf.data(), sizeof(h));
  h.format_version = 1;
  std::memcpy(buf.data(), &h, sizeof(h));
  EXPECT_FALSE(is_record_start(buf.data(), kBlockSize, 7));
  Result<RecordView> r = decode_record(buf.data(), kBlockSize);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);

  encode_region_header(buf.data(), 0, 1, 4 << 20);
  RegionHeader rh;
  std::memcpy(&rh, buf.data(), sizeof(rh));
  rh.format_version = 1;
  std::memcpy(buf.data(), &rh, sizeof(rh));
  EXPECT_FALSE(decode_region_header(buf.data(), kBlockSize).is_ok());
}

TEST(RecordTest, RegionHeaderKeepsTheFreeFlag) {
  AlignedBuffer buf(kBlockSize);
  encode_region_header(buf.data(), 2, 40, 4 << 20, kRegionFree);
  Result<RegionHeader> h = decode_region_header(buf.data(), kBlockSize);
  ASSERT_TRUE(h.is_ok());
  EXPECT_EQ(h->flags, kRegionFree);
  EXPECT_EQ(h->seq, 40u);
}

TEST(RecordTest, EmptyDataRoundTrips) {
  AlignedBuffer buf(kBlockSize);
  encode_record(buf.data(), "k", "", {0, 1, 1, 0});
  Result<RecordView> r = decode_record(buf.data(), kBlockSize);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->data.size(), 0u);
}

// Every byte of header, key and data is covered: flipping any one of them
// must make the record undecodable.
TEST(RecordTest, EverySingleFlippedByteIsRejected) {
  const std::string key = "flip-key";
  const std::string data = "the quick brown fox jumps over the lazy dog, 0123456789";
  AlignedBuffer buf(record_size(key.size(), data.size()));
  const uint64_t size = encode_record(buf.data(), key, data, {1, 2, 3, 4});
  const size_t covered = sizeof(RecordHeader) + key.size() + data.size();
  for (size_t i = 0; i < covered; ++i) {
    for (uint8_t mask : {0x01, 0x80, 0xff}) {
      buf.data()[i] ^= static_cast<char>(mask);
      EXPECT_FALSE(decode_record(buf.data(), size).is_ok()) << "byte " << i << " mask " << +mask;
      buf.data()[i] ^= static_cast<char>(mask);
    }
  }
  EXPECT_TRUE(decode_record(buf.data(), size).is_ok());
}

TEST(RecordTest, LengthsPastTheExtentAreRejected) {
  AlignedBuffer buf(2 * kBlockSize);
  const std::string data(5000, 'd');
  encode_record(buf.data(), "k", data, {0, 1, 1, 0});
  EXPECT_FALSE(decode_record(buf.data(), kBlockSize).is_ok());  // torn: second block missing
  EXPECT_FALSE(decode_record(buf.data(), 20).is_ok());
  EXPECT_TRUE(decode_record(buf.data(), 2 * kBlockSize).is_ok());
}

TEST(RecordTest, RegionHeaderRoundTripAndFlips) {
  AlignedBuffer buf(kBlockSize);
  encode_region_header(buf.data(), 5, 99, 4 << 20);
  Result<RegionHeader> h = decode_region_header(buf.data(), kBlockSize);
  ASSERT_TRUE(h.is_ok());
  EXPECT_EQ(h->region_index, 5u);
  EXPECT_EQ(h->seq, 99u);
  EXPECT_EQ(h->region_size, 4u << 20);
  for (size_t i = 0; i < sizeof(RegionHeader); ++i) {
    buf.data()[i] ^= 0x10;
    EXPECT_FALSE(decode_region_header(buf.data(), kBlockSize).is_ok()) << "byte " << i;
    buf.data()[i] ^= 0x10;
  }
}

}  // namespace
}  // namespace tierkv::flash
