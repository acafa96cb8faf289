// Recovery: the index is rebuilt from the regions at open. Clean restarts
// keep everything; torn and corrupt records are dropped, counted, and never
// served.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "flash/flash_tier.h"
#include "flash/record.h"
#include "tests/flash/flash_test_util.h"

namespace tierkv::flash {
namespace {

using testing::flip_byte;
using testing::pattern;
using testing::read_sync;
using testing::small_options;
using testing::TempDir;
using testing::write_sync;

struct Extent {
  uint64_t offset = 0;   // of the record in the file
  uint64_t covered = 0;  // header + key + data: the checksummed bytes
  uint64_t region_offset = 0;
};

std::string read_file(const std::string& path) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return out;
  out.resize(static_cast<size_t>(::lseek(fd, 0, SEEK_END)));
  const ssize_t n = ::pread(fd, out.data(), out.size(), 0);
  out.resize(n < 0 ? 0 : static_cast<size_t>(n));
  ::close(fd);
  return out;
}

// The device's salt, from the newer valid superblock slot.
uint64_t file_salt(const std::string& file) {
  uint64_t salt = 0, generation = 0;
  for (uint64_t slot = 0; slot < kSuperblockSlots && file.size() >= kDataStart; ++slot) {
    Result<Superblock> sb = decode_superblock(file.data() + slot * kBlockSize, kBlockSize);
    if (sb.is_ok() && sb->generation >= generation) {
      salt = sb->salt;
      generation = sb->generation;
    }
  }
  return salt;
}

// Where each record of a freshly written file is, found with the codec.
std::map<std::string, Extent> map_records(const std::string& path, uint64_t region_size) {
  const std::string file = read_file(path);
  const uint64_t salt = file_salt(file);
  std::map<std::string, Extent> out;
  for (uint64_t region = kDataStart; region + region_size <= file.size(); region += region_size) {
    Result<RegionHeader> h = decode_region_header(file.data() + region, kBlockSize, salt);
    if (!h.is_ok()) continue;
    for (uint64_t off = kBlockSize; off < region_size;) {
      const char* p = file.data() + region + off;
      Result<RecordView> r = decode_record(p, region_size - off, {salt, region + off});
      if (!is_record_start(p, region_size - off, h->seq) || !r.is_ok()) {
        off += kRecordAlign;
        continue;
      }
      std::string name(r->key);
      name += "#" + std::to_string(r->header.chunk_index);
      out[name] = {region + off, sizeof(RecordHeader) + r->key.size() + r->data.size(), region};
      off += record_size(r->key.size(), r->data.size());
    }
  }
  return out;
}

TEST(FlashRecoveryTest, CleanRestartKeepsNewestVersions) {
  TempDir dir;
  const FlashOptions o = small_options(dir.file("f"));
  {
    auto tier = FlashTier::open(o);
    ASSERT_TRUE(tier.is_ok());
    for (int i = 0; i < 30; ++i) {
      const std::string key = "obj" + std::to_string(i);
      for (uint32_t c = 0; c < 3; ++c) {
        ASSERT_TRUE(write_sync(**tier, {.key = key,
                                        .chunk_index = c,
                                        .version = 10,
                                        .object_size = 3 * 70'000,
                                        .data = pattern(70'000, i + c)})
                        .is_ok());
      }
      if (i % 3 == 0) {  // a newer single-chunk version of every third object
        ASSERT_TRUE(write_sync(**tier, {.key = key,
                                        .chunk_index = 0,
                                        .version = 11 + static_cast<uint64_t>(i),
                                        .object_size = 5,
                                        .data = "fresh"})
                        .is_ok());
      }
    }
  }
  auto tier = FlashTier::open(o);
  ASSERT_TRUE(tier.is_ok()) << tier.status().to_string();
  FlashTier& t = **tier;
  EXPECT_EQ(t.recovery().objects, 30u);
  EXPECT_EQ(t.recovery().records_recovered, 100u);
  EXPECT_EQ(t.recovery().records_dropped, 0u);
  EXPECT_EQ(t.recovered_max_version(), 11u + 27);
  for (int i = 0; i < 30; ++i) {
    const std::string key = "obj" + std::to_string(i);
    if (i % 3 == 0) {
      EXPECT_EQ(*read_sync(t, key, 0), "fresh");
      EXPECT_FALSE(t.contains(key, 1)) << "an older version's chunk survived";
      EXPECT_EQ(t.lookup(key)->object_size, 5u);
    } else {
      for (uint32_t c = 0; c < 3; ++c) EXPECT_EQ(*read_sync(t, key, c, 10), pattern(70'000, i + c));
    }
  }
}

// remove() writes a tombstone: the object stays removed after a restart,
// while a newer version written after the removal survives it.
TEST(FlashRecoveryTest, RemovedObjectsStayRemovedAfterRestart) {
  TempDir dir;
  const FlashOptions o = small_options(dir.file("f"));
  {
    auto tier = FlashTier::open(o);
    ASSERT_TRUE(tier.is_ok());
    for (const char* key : {"gone", "back", "kept"}) {
      for (uint32_t c = 0; c < 3; ++c) {
        ASSERT_TRUE(
            write_sync(**tier,
                       {.key = key, .chunk_index = c, .version = 5, .data = pattern(20'000, c)})
                .is_ok());
      }
    }
    EXPECT_FALSE((*tier)->remove("gone", 4));  // an older bound keeps version 5
    EXPECT_TRUE((*tier)->remove("gone", 5));
    EXPECT_TRUE((*tier)->remove("back", 5));
    EXPECT_FALSE((*tier)->remove("never", 9));
    EXPECT_FALSE((*tier)->contains("gone", 0));
    ASSERT_TRUE(write_sync(**tier, {.key = "back", .version = 6, .data = "again"}).is_ok());
  }
  auto tier = FlashTier::open(o);
  ASSERT_TRUE(tier.is_ok());
  EXPECT_EQ((*tier)->recovery().tombstones,
            2u);  // nothing to cover: no tombstone for "gone" up to 4
  EXPECT_FALSE((*tier)->lookup("gone"));
  EXPECT_EQ(*read_sync(**tier, "back", 0), "again");
  EXPECT_FALSE((*tier)->contains("back", 1));
  EXPECT_EQ(*read_sync(**tier, "kept", 2), pattern(20'000, 2));
  EXPECT_EQ((*tier)->recovered_max_version(), 6u);
}

// The state a kill -9 leaves: the file as it is while the tier runs.
void copy_file(const std::string& from, const std::string& to) {
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
}

// Lazy tombstones (an overwrite's) gather until a block's worth is there or
// a flush, and then share blocks. Each is followed by a write that waits
// for its landing (as evictions follow overwrites in service), which would
// send a prompt tombstone down alone in a padded block: 64 of them then
// cost 64 write units, where lazy ones cost a few blocks. Once flushed they
// hold through a crash scan, and a version written after them survives.
TEST(FlashRecoveryTest, LazyTombstonesShareBlocksAndHoldOnceFlushed) {
  TempDir dir;
  const FlashOptions o = small_options(dir.file("f"));
  constexpr int kKeys = 64;
  auto key = [](int i) { return "overwritten-" + std::to_string(i); };
  // Fillers of one block each, as the eviction of a 4 KiB value: a record
  // that never shares its block, so any record between two of them pads.
  std::vector<std::string> filler_keys;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kKeys; ++i) {
      filler_keys.push_back("filler-" + std::to_string(round) + "-" + std::to_string(i + 100));
    }
  }
  size_t filler_bytes = kBlockSize;
  while (record_size(filler_keys[0].size(), filler_bytes) > kBlockSize) --filler_bytes;
  const std::string filler_data = pattern(filler_bytes, 1);
  auto filler = [&](int round, int i) {
    return ChunkWrite{.key = filler_keys[round * kKeys + i], .version = 1, .data = filler_data};
  };
  {
    auto tier = FlashTier::open(o);
    ASSERT_TRUE(tier.is_ok());
    for (int i = 0; i < kKeys; ++i) {
      ASSERT_TRUE(
          write_sync(**tier, {.key = key(i), .version = 1, .data = pattern(100, i)}).is_ok());
    }
    (*tier)->flush();
    auto written = [&] { return (*tier)->stats().device_write_bytes; };
    const uint64_t start = written();
    for (int i = 0; i < kKeys; ++i) ASSERT_TRUE(write_sync(**tier, filler(0, i)).is_ok());
    const uint64_t fillers_alone = written() - start;
    for (int i = 0; i < kKeys; ++i) {
      EXPECT_TRUE((*tier)->remove(key(i), 1, {.lazy = true, .durable = {}}));
      EXPECT_FALSE((*tier)->lookup(key(i)));
      ASSERT_TRUE(write_sync(**tier, filler(1, i)).is_ok());
    }
    (*tier)->flush();
    const uint64_t with_tombstones = written() - start - fillers_alone;
    EXPECT_LE(with_tombstones, fillers_alone + 4 * kBlockSize);  // no unsigned wrap
    ASSERT_TRUE(write_sync(**tier, {.key = key(0), .version = 2, .data = "newer"}).is_ok());
    copy_file(o.path, dir.file("crashed"));
  }
  FlashOptions crashed = o;
  crashed.path = dir.file("crashed");
  auto tier = FlashTier::open(crashed);  // no snapshot in the copy: a scan
  ASSERT_TRUE(tier.is_ok());
  EXPECT_EQ((*tier)->recovery().tombstones, static_cast<uint64_t>(kKeys));
  EXPECT_EQ(*read_sync(**tier, key(0), 0), "newer");
  for (int i = 1; i < kKeys; ++i) EXPECT_FALSE((*tier)->lookup(key(i))) << key(i);
}

// With fsync everysec a lazy tombstone goes down at the next tick without
// a flush; one with a durability callback (a DEL's) is never lazy.
TEST(FlashRecoveryTest, LazyTombstonesLandByTheNextEverysecTick) {
  TempDir dir;
  FlashOptions o = small_options(dir.file("f"));
  o.fsync = FsyncPolicy::kEverySec;
  auto tier = FlashTier::open(o);
  ASSERT_TRUE(tier.is_ok());
  ASSERT_TRUE(write_sync(**tier, {.key = "k", .version = 1, .data = "v"}).is_ok());
  (*tier)->flush();
  const uint64_t before = (*tier)->stats().device_write_bytes;
  EXPECT_TRUE((*tier)->remove("k", 1, {.lazy = true, .durable = {}}));
  // Bounded: the tick comes once a second, however loaded the machine.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((*tier)->stats().device_write_bytes == before &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GT((*tier)->stats().device_write_bytes, before);

  ASSERT_TRUE(write_sync(**tier, {.key = "d", .version = 3, .data = "v"}).is_ok());
  auto landed = std::make_shared<std::promise<Status>>();
  EXPECT_TRUE((*tier)->remove(
      "d", 3, {.lazy = true, .durable = [landed](Status st) { landed->set_value(st); }}));
  // Without a flush or a tick to wait for: lands as writes go down.
  EXPECT_TRUE(landed->get_future().get().is_ok());
}

// A hot chunk's reinsertion copy and a DEL, EXPIRE or PERSIST that lands
// while the reclaimer reads it: the copy is skipped, or carries the new
// expiry (or none), so a recovery scan neither brings the deleted key back
// nor the old expiry.
TEST(FlashRecoveryTest, ADelExpireOrPersistDuringAReinsertionHoldsAfterACrash) {
  TempDir dir;
  FlashOptions o = small_options(dir.file("f"));
  o.reinsertion = true;
  FlashTier* tier_seen = nullptr;
  bool landed = false;
  const int64_t later = 4'000'000'000'000;  // unix ms, far ahead
  o.after_reinsert_read = [&] {
    if (landed || tier_seen == nullptr) return;
    landed = true;
    EXPECT_TRUE(tier_seen->remove("deleted", 1));
    EXPECT_TRUE(tier_seen->set_expiry("expiring", 1, later));
    EXPECT_TRUE(tier_seen->set_expiry("persisted", 1, 0));
  };
  {
    auto tier = FlashTier::open(o);
    ASSERT_TRUE(tier.is_ok());
    for (const char* key : {"deleted", "expiring", "persisted"}) {
      const int64_t expiry = std::string_view(key) == "persisted" ? later - 1 : 0;
      ASSERT_TRUE(
          write_sync(**tier,
                     {.key = key, .version = 1, .data = pattern(8'000, 1), .expire_at_ms = expiry})
              .is_ok());
      ASSERT_TRUE(read_sync(**tier, key, 0).is_ok());  // a hit: reinserted on reclaim
    }
    tier_seen = tier->get();
    // Fill until their region is reclaimed (bounded: 4x the device).
    for (uint64_t i = 0; i < 64 && !landed; ++i) {
      for (uint32_t c = 0; c < 4; ++c) {
        ASSERT_TRUE(write_sync(**tier, {.key = "fill" + std::to_string(i),
                                        .chunk_index = c,
                                        .version = 2,
                                        .data = pattern(1 << 20, i)})
                        .is_ok());
      }
      (*tier)->wait_for_reclaimer();
    }
    ASSERT_TRUE(landed);
    (*tier)->wait_for_reclaimer();
    EXPECT_FALSE((*tier)->lookup("deleted"));
    ASSERT_TRUE((*tier)->lookup("expiring"));
    EXPECT_EQ((*tier)->lookup("expiring")->expire_at_ms, later);
    ASSERT_TRUE((*tier)->lookup("persisted"));
    EXPECT_EQ((*tier)->lookup("persisted")->expire_at_ms, 0);
    tier_seen = nullptr;
  }
  auto tier = FlashTier::open(o);  // no snapshot: the index comes from a scan
  ASSERT_TRUE(tier.is_ok());
  EXPECT_FALSE((*tier)->lookup("deleted"));
  ASSERT_TRUE((*tier)->lookup("expiring"));
  EXPECT_EQ((*tier)->lookup("expiring")->expire_at_ms, later);
  ASSERT_TRUE((*tier)->lookup("persisted"));
  EXPECT_EQ((*tier)->lookup("persisted")->expire_at_ms, 0);
}

// Region sequence numbers carry FIFO order across a restart: after reopening,
// the oldest data is still the first to go, and new data is never reclaimed
// before it.
TEST(FlashRecoveryTest, FifoOrderSurvivesRestart) {
  TempDir dir;
  FlashOptions o = small_options(dir.file("f"));
  o.size = 16 << 20;
  o.region_size = 1 << 20;
  const size_t value = (256 << 10) - 8192;  // 4 records per region
  int written = 0;
  for (int session = 0; session < 3; ++session) {
    auto tier = FlashTier::open(o);
    ASSERT_TRUE(tier.is_ok());
    for (int i = 0; i < 30; ++i, ++written) {
      ASSERT_TRUE(write_sync(**tier, {.key = "k" + std::to_string(written),
                                      .version = 1,
                                      .data = pattern(value, written)})
                      .is_ok());
    }
  }
  auto tier = FlashTier::open(o);
  ASSERT_TRUE(tier.is_ok());
  int first_present = -1;
  for (int i = 0; i < written; ++i) {
    const bool present = (*tier)->contains("k" + std::to_string(i), 0);
    if (present && first_present < 0) first_present = i;
    if (first_present >= 0) {
      EXPECT_TRUE(present) << "hole at " << i;
    }
  }
  EXPECT_GT(first_present, 0);  // 90 records do not fit in 64 slots
  EXPECT_LT(first_present, 40);
  EXPECT_EQ(*read_sync(**tier, "k" + std::to_string(written - 1), 0), pattern(value, written - 1));
}

TEST(FlashRecoveryTest, TruncatedTailRecordIsDropped) {
  TempDir dir;
  const FlashOptions o = small_options(dir.file("f"));
  {
    auto tier = FlashTier::open(o);
    ASSERT_TRUE(tier.is_ok());
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(
          write_sync(**tier,
                     {.key = "t" + std::to_string(i), .version = 1, .data = pattern(100'000, i)})
              .is_ok());
    }
  }
  auto records = map_records(o.path, o.region_size);
  ASSERT_EQ(records.size(), 10u);
  // Cut the file in the middle of the last record (as a crash mid-write
  // would leave it); open() extends the file again with zeros.
  ASSERT_EQ(::truncate(o.path.c_str(), static_cast<off_t>(records["t9#0"].offset + 5000)), 0);
  auto tier = FlashTier::open(o);
  ASSERT_TRUE(tier.is_ok()) << tier.status().to_string();
  EXPECT_EQ((*tier)->recovery().records_recovered, 9u);
  EXPECT_EQ((*tier)->recovery().records_dropped, 1u);
  EXPECT_FALSE((*tier)->contains("t9", 0));
  for (int i = 0; i < 9; ++i)
    EXPECT_EQ(*read_sync(**tier, "t" + std::to_string(i), 0), pattern(100'000, i));
  // The log continues after the torn record's region.
  ASSERT_TRUE(write_sync(**tier, {.key = "after", .version = 2, .data = "x"}).is_ok());
  EXPECT_EQ(*read_sync(**tier, "after", 0), "x");
}

// Random bytes flipped at random offsets of the written part of the file:
// every record a flip lands in is dropped at recovery (never served), every
// other record is served intact.
TEST(FlashRecoveryTest, RandomFlipsAreDetectedEveryTime) {
  size_t total_damaged = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    TempDir dir;
    FlashOptions o = small_options(dir.file("f"));
    o.size = 8 << 20;
    o.region_size = 1 << 20;
    std::mt19937_64 rng(seed);
    std::map<std::string, std::string> values;
    {
      auto tier = FlashTier::open(o);
      ASSERT_TRUE(tier.is_ok());
      for (int i = 0; i < 60; ++i) {
        const std::string key = "key-" + std::to_string(seed) + "-" + std::to_string(i);
        values[key] = pattern(1000 + rng() % 60'000, rng());
        ASSERT_TRUE(write_sync(**tier, {.key = key, .version = 1, .data = values[key]}).is_ok());
      }
    }
    const auto records = map_records(o.path, o.region_size);
    ASSERT_EQ(records.size(), values.size());
    uint64_t end = 0;
    for (const auto& [name, e] : records) end = std::max(end, e.offset + e.covered);
    std::map<std::string, bool> hit;
    std::map<uint64_t, bool> header_hit;  // region offsets whose header was flipped
    for (int f = 0; f < 12; ++f) {
      const uint64_t at = rng() % end;
      flip_byte(o.path, at, static_cast<uint8_t>(1 + rng() % 255));
      if (at % o.region_size < sizeof(RegionHeader))
        header_hit[at / o.region_size * o.region_size] = true;
      for (const auto& [name, e] : records) {
        if (at >= e.offset && at < e.offset + e.covered) hit[name] = true;
      }
    }
    auto tier = FlashTier::open(o);
    ASSERT_TRUE(tier.is_ok());
    size_t damaged = 0;
    for (const auto& [name, e] : records) {
      const std::string key = name.substr(0, name.find('#'));
      const bool lost = hit.count(name) > 0 || header_hit.count(e.region_offset) > 0;
      Result<std::string> got = read_sync(**tier, key, 0);
      if (lost) {
        ++damaged;
        EXPECT_FALSE(got.is_ok()) << "seed " << seed << ": damaged record served: " << key;
      } else {
        ASSERT_TRUE(got.is_ok()) << "seed " << seed << ": intact record lost: " << key;
        EXPECT_EQ(*got, values[key]);
      }
    }
    const RecoveryStats& r = (*tier)->recovery();
    EXPECT_EQ(r.records_recovered, records.size() - damaged) << "seed " << seed;
    if (damaged > 0 && header_hit.empty()) {
      EXPECT_GE(r.records_dropped, 1u) << "seed " << seed;
    }
    EXPECT_LE(r.records_dropped, damaged) << "seed " << seed;
    EXPECT_EQ((*tier)->stats().checksum_failures, 0u);
    total_damaged += damaged;
  }
  std::printf("[flips] %zu records damaged over 6 rounds, none served\n", total_damaged);
  EXPECT_GT(total_damaged, 10u);  // the flips did land in records
}

// Damage that appears while the tier runs is caught on the read path.
TEST(FlashRecoveryTest, CorruptionUnderARunningTierIsAMiss) {
  TempDir dir;
  const FlashOptions o = small_options(dir.file("f"));
  auto tier = FlashTier::open(o);
  ASSERT_TRUE(tier.is_ok());
  ASSERT_TRUE(
      write_sync(**tier, {.key = "victim", .version = 1, .data = pattern(30'000, 5)}).is_ok());
  ASSERT_TRUE(write_sync(**tier, {.key = "bystander", .version = 1, .data = "fine"}).is_ok());
  const auto records = map_records(o.path, o.region_size);
  const Extent& e = records.at("victim#0");
  flip_byte(o.path, e.offset + e.covered - 100, 0x04);  // inside the data
  Result<std::string> got = read_sync(**tier, "victim", 0);
  ASSERT_FALSE(got.is_ok());
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*tier)->stats().checksum_failures, 1u);
  EXPECT_FALSE((*tier)->contains("victim", 0));  // dropped: no second failure
  EXPECT_EQ(*read_sync(**tier, "bystander", 0), "fine");
}

}  // namespace
}  // namespace tierkv::flash
