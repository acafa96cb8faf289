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
#include "flash_test_util.h"

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
