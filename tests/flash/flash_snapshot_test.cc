// The index snapshot of a clean shutdown: used once, only if nothing was
// written after it, and only if it verifies; it gives exactly the key space
// a scan of the same device image gives.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "flash/flash_tier.h"
#include "flash/record.h"
#include "tests/flash/flash_test_util.h"

namespace tierkv::flash {
namespace {

using testing::open_or_die;
using testing::pattern;
using testing::read_sync;
using testing::small_options;
using testing::TempDir;
using testing::write_sync;

// Seeded writes, overwrites, removals and expiry changes over `keys` keys,
// objects of 1 to 4 chunks, through enough data that regions are reclaimed.
void churn(FlashTier& t, int ops, uint64_t seed) {
  std::mt19937_64 rng(seed);
  uint64_t version = 1;
  for (int i = 0; i < ops; ++i) {
    const std::string key = "k" + std::to_string(rng() % 150);
    const uint64_t dice = rng() % 10;
    if (dice == 0) {
      t.remove(key, version++);
      continue;
    }
    if (dice == 1) {
      if (auto info = t.lookup(key)) t.set_expiry(key, info->version, 1'900'000'000'000 + i);
      continue;
    }
    const uint32_t chunks = 1 + static_cast<uint32_t>(rng() % 4);
    const uint64_t v = version++;
    for (uint32_t c = 0; c < chunks; ++c) {
      ASSERT_TRUE(write_sync(t, {.key = key,
                                 .chunk_index = c,
                                 .version = v,
                                 .object_size = chunks * 20'000ull,
                                 .chunk_count = chunks,
                                 .data = pattern(20'000, v * 8 + c)})
                      .is_ok());
    }
  }
  t.flush();
}

std::map<std::string, std::string> describe(FlashTier& t) {
  std::map<std::string, std::string> out;
  for (size_t s = 0; s < t.key_shard_count(); ++s) {
    for (const std::string& k : t.keys_in_shard(s)) {
      std::optional<FlashObjectInfo> info = t.lookup(k);
      if (!info) continue;
      std::string d = std::to_string(info->version) + "/" + std::to_string(info->object_size) +
                      "/" + std::to_string(info->expire_at_ms) + "/";
      for (uint32_t c : info->chunks) d += std::to_string(c) + ",";
      out[k] = d;
    }
  }
  return out;
}

void copy_file(const std::string& from, const std::string& to) {
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
}

FlashOptions options(const TempDir& dir, const std::string& name) {
  FlashOptions o = small_options(dir.file(name));
  o.region_size = 1 << 20;
  o.size = layout_size(12, o.region_size);
  return o;
}

TEST(FlashSnapshotTest, SnapshotGivesExactlyTheScansKeySpace) {
  TempDir dir;
  const FlashOptions o = options(dir, "f");
  std::map<std::string, std::string> before;
  {
    auto t = open_or_die(o);
    ASSERT_TRUE(t);
    churn(*t, 1500, 42);
    EXPECT_GT(t->stats().reclaims, 0u);
    before = describe(*t);
    ASSERT_TRUE(t->write_snapshot().is_ok());
  }
  // The same image, twice: one opens from the snapshot, the other has its
  // snapshot damaged and scans.
  copy_file(dir.file("f"), dir.file("g"));
  {
    std::fstream g(dir.file("g"), std::ios::in | std::ios::out | std::ios::binary);
    g.seekp(static_cast<std::streamoff>(plan_layout(o.size, o.region_size).snapshot_offset + 100));
    g.put('\x5a');
  }
  auto snap = open_or_die(o);
  FlashOptions scanned_options = o;
  scanned_options.path = dir.file("g");
  auto scan = open_or_die(scanned_options);
  ASSERT_TRUE(snap && scan);
  EXPECT_TRUE(snap->recovery().from_snapshot);
  EXPECT_FALSE(scan->recovery().from_snapshot);
  EXPECT_EQ(snap->recovery().regions_scanned, 0u);
  EXPECT_EQ(describe(*snap), before);
  EXPECT_EQ(describe(*scan), before);
  EXPECT_GE(snap->recovered_max_version(), scan->recovered_max_version());
  // Reads work from the loaded index, and new writes go on.
  for (const auto& [key, desc] : before) {
    ASSERT_TRUE(read_sync(*snap, key, 0).is_ok()) << key;
  }
  ASSERT_TRUE(
      write_sync(*snap, {.key = "new", .version = snap->recovered_max_version() + 1, .data = "n"})
          .is_ok());
}

TEST(FlashSnapshotTest, SnapshotIsUsedOnceAndNeverAfterALaterWrite) {
  TempDir dir;
  const FlashOptions o = options(dir, "f");
  {
    auto t = open_or_die(o);
    churn(*t, 200, 7);
    ASSERT_TRUE(t->write_snapshot().is_ok());
    // A late write after the snapshot: it must be found after a restart.
    ASSERT_TRUE(write_sync(*t, {.key = "late", .version = 100000, .data = "late"}).is_ok());
  }
  {
    auto t = open_or_die(o);
    EXPECT_FALSE(t->recovery().from_snapshot);
    EXPECT_EQ(*read_sync(*t, "late", 0), "late");
    ASSERT_TRUE(t->write_snapshot().is_ok());
  }
  {
    auto t = open_or_die(o);  // uses it ...
    EXPECT_TRUE(t->recovery().from_snapshot);
    EXPECT_EQ(*read_sync(*t, "late", 0), "late");
    // ... and "crashes": no snapshot written at this stop.
  }
  auto t = open_or_die(o);
  EXPECT_FALSE(t->recovery().from_snapshot);
  EXPECT_EQ(*read_sync(*t, "late", 0), "late");
}

// Overwrites `bytes` at `offset` of the file.
void patch(const std::string& path, uint64_t offset, const void* bytes, size_t n) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n));
}

uint32_t read_u32(const std::string& path, uint64_t offset) {
  std::ifstream f(path, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  uint32_t v = 0;
  f.read(reinterpret_cast<char*>(&v), sizeof(v));
  return v;
}

// A clean image of seeded churn, and the key space it holds.
std::map<std::string, std::string> clean_image(const FlashOptions& o) {
  auto t = open_or_die(o);
  churn(*t, 400, 11);
  std::map<std::string, std::string> keys = describe(*t);
  EXPECT_TRUE(t->write_snapshot().is_ok());
  return keys;
}

// The snapshot layout the damage below aims at (flash_snapshot.cc): a
// 32-byte header {magic, format u16, reserved u16, regions u32, fifo u32,
// entries u64, max version u64}, 16 bytes per region, 4 per FIFO slot, then
// the entries, each starting with its key length.
constexpr uint64_t kHeaderBytes = 32;

TEST(FlashSnapshotTest, SnapshotOfAnotherFormatIsIgnoredAndTheScanTakesOver) {
  TempDir dir;
  const FlashOptions o = options(dir, "f");
  const std::map<std::string, std::string> before = clean_image(o);
  const uint16_t other_format = 0x7777;
  patch(o.path, plan_layout(o.size, o.region_size).snapshot_offset + 4, &other_format, 2);
  auto t = open_or_die(o);
  ASSERT_TRUE(t);
  EXPECT_FALSE(t->recovery().from_snapshot);
  EXPECT_GT(t->recovery().regions_scanned, 0u);
  EXPECT_EQ(describe(*t), before);
}

TEST(FlashSnapshotTest, DamagedLengthsAreRejectedBeforeTheyAreUsed) {
  // A key length of nearly 4 GiB in the first entry, and separately an
  // entry count of 2^60: both must be refused (not allocated), then scanned.
  for (int which = 0; which < 2; ++which) {
    TempDir dir;
    const FlashOptions o = options(dir, "f");
    const std::map<std::string, std::string> before = clean_image(o);
    const uint64_t area = plan_layout(o.size, o.region_size).snapshot_offset;
    if (which == 0) {
      const uint64_t first_entry = area + kHeaderBytes + 16ull * read_u32(o.path, area + 8) +
                                   4ull * read_u32(o.path, area + 12);
      const uint32_t huge = 0xFFFFFFF0u;
      patch(o.path, first_entry, &huge, sizeof(huge));
    } else {
      const uint64_t entries = uint64_t{1} << 60;
      patch(o.path, area + 16, &entries, sizeof(entries));
    }
    auto t = open_or_die(o);
    ASSERT_TRUE(t) << which;
    EXPECT_FALSE(t->recovery().from_snapshot) << which;
    EXPECT_EQ(describe(*t), before) << which;
  }
}

TEST(FlashSnapshotTest, RemovalAfterTheSnapshotIsKept) {
  TempDir dir;
  const FlashOptions o = options(dir, "f");
  {
    auto t = open_or_die(o);
    ASSERT_TRUE(write_sync(*t, {.key = "gone", .version = 5, .data = "x"}).is_ok());
    ASSERT_TRUE(t->write_snapshot().is_ok());
    EXPECT_TRUE(t->remove("gone", 5));
    t->flush();
  }
  auto t = open_or_die(o);
  EXPECT_FALSE(t->recovery().from_snapshot);
  EXPECT_FALSE(t->lookup("gone"));
}

}  // namespace
}  // namespace tierkv::flash
