// The FlashTier calls the Store builds on: expiry, versioned removal,
// forget, clear, key-space iteration and contains_object.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cstring>
#include <future>
#include <set>
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

// The expiry a read hands back with the chunk.
int64_t read_expiry(FlashTier& tier, std::string_view key, uint32_t chunk) {
  std::promise<int64_t> done;
  auto future = done.get_future();
  Status st = tier.read_chunk(key, chunk, std::nullopt, [&done](Result<FlashChunk> r) {
    done.set_value(r.is_ok() ? r->expire_at_ms() : -12345);
  });
  if (!st.is_ok()) return -12345;
  return future.get();
}

TEST(FlashApiTest, ExpiryIsStoredReturnedAndRecovered) {
  TempDir dir;
  const FlashOptions o = small_options(dir.file("f"));
  const int64_t expire = 1'900'000'000'000;
  {
    auto t = open_or_die(o);
    ASSERT_TRUE(t);
    for (uint32_t c = 0; c < 2; ++c) {
      ASSERT_TRUE(write_sync(*t, {.key = "e",
                                  .chunk_index = c,
                                  .version = 3,
                                  .chunk_count = 2,
                                  .data = pattern(5000, c),
                                  .expire_at_ms = expire})
                      .is_ok());
    }
    ASSERT_TRUE(write_sync(*t, {.key = "none", .version = 4, .data = "x"}).is_ok());
    EXPECT_EQ(t->lookup("e")->expire_at_ms, expire);
    EXPECT_EQ(t->lookup("none")->expire_at_ms, 0);
    EXPECT_EQ(read_expiry(*t, "e", 1), expire);
    EXPECT_EQ(read_expiry(*t, "none", 0), 0);
  }
  auto t = open_or_die(o);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->lookup("e")->expire_at_ms, expire);
  EXPECT_EQ(t->lookup("none")->expire_at_ms, 0);
  EXPECT_EQ(read_expiry(*t, "e", 0), expire);
  EXPECT_EQ(*read_sync(*t, "e", 1), pattern(5000, 1));  // not enforced here: still served
}

TEST(FlashApiTest, SetExpiryAppliesToTheIndexedVersionAndPersists) {
  TempDir dir;
  const FlashOptions o = small_options(dir.file("f"));
  {
    auto t = open_or_die(o);
    ASSERT_TRUE(t);
    ASSERT_TRUE(write_sync(*t, {.key = "k", .chunk_index = 0, .version = 7, .data = "a"}).is_ok());
    EXPECT_FALSE(t->set_expiry("k", 6, 111));  // not the indexed version
    EXPECT_FALSE(t->set_expiry("absent", 7, 111));
    EXPECT_TRUE(t->set_expiry("k", 7, 111));
    EXPECT_TRUE(t->set_expiry("k", 7, 222));  // the newest wins
    // A chunk of the same version landing later keeps the expiry set meanwhile.
    ASSERT_TRUE(
        write_sync(*t,
                   {.key = "k", .chunk_index = 1, .version = 7, .data = "b", .expire_at_ms = 111})
            .is_ok());
    EXPECT_EQ(t->lookup("k")->expire_at_ms, 222);
    EXPECT_EQ(read_expiry(*t, "k", 1), 222);
    // An expiry of an older version does not stick to a newer one.
    ASSERT_TRUE(write_sync(*t, {.key = "p", .version = 1, .data = "p1"}).is_ok());
    EXPECT_TRUE(t->set_expiry("p", 1, 333));
    ASSERT_TRUE(write_sync(*t, {.key = "p", .version = 2, .data = "p2"}).is_ok());
    EXPECT_EQ(t->lookup("p")->expire_at_ms, 0);
    // Back to no expiry (PERSIST).
    ASSERT_TRUE(write_sync(*t, {.key = "q", .version = 1, .data = "q", .expire_at_ms = 5}).is_ok());
    EXPECT_TRUE(t->set_expiry("q", 1, 0));
  }
  auto t = open_or_die(o);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->recovery().expiry_records, 4u);
  EXPECT_EQ(t->lookup("k")->expire_at_ms, 222);
  EXPECT_EQ(t->lookup("k")->chunks.size(), 2u);
  EXPECT_EQ(t->lookup("p")->version, 2u);
  EXPECT_EQ(t->lookup("p")->expire_at_ms, 0);
  EXPECT_EQ(t->lookup("q")->expire_at_ms, 0);
}

// The hard guarantee: a write accepted before remove(key, v) returned, of a
// version <= v, is never indexed, neither when it lands nor after a restart.
TEST(FlashApiTest, RemoveNeverLetsAnInFlightWriteResurrect) {
  TempDir dir;
  const FlashOptions o = small_options(dir.file("f"));
  constexpr int kRounds = 300;
  std::atomic<int> conflicts{0};
  std::atomic<int> landed_ok{0};
  std::atomic<int> other{0};
  {
    auto t = open_or_die(o);
    ASSERT_TRUE(t);
    for (int i = 0; i < kRounds; ++i) {
      const std::string key = "r" + std::to_string(i);
      const uint64_t version = 10 + i;
      Status st =
          t->write_chunk({.key = key, .version = version, .data = pattern(300, i)}, [&](Status s) {
            if (s.code() == StatusCode::kConflict) {
              ++conflicts;
            } else if (s.is_ok()) {
              ++landed_ok;
            } else {
              ++other;
            }
          });
      ASSERT_TRUE(st.is_ok()) << st.to_string();
      t->remove(key, version);
      // Whether the write landed first or not: gone once remove returned.
      EXPECT_FALSE(t->lookup(key)) << key;
    }
    // A newer version written after the removal is kept.
    ASSERT_TRUE(write_sync(*t, {.key = "r0", .version = 1000, .data = "newer"}).is_ok());
    t->flush();
    EXPECT_EQ(conflicts + landed_ok, kRounds);
    EXPECT_EQ(other, 0);
    EXPECT_GT(conflicts, 0) << "no write was still in flight at its removal";
    for (int i = 1; i < kRounds; ++i) EXPECT_FALSE(t->lookup("r" + std::to_string(i))) << i;
    EXPECT_EQ(t->object_count(), 1u);
  }
  auto t = open_or_die(o);
  ASSERT_TRUE(t);
  for (int i = 1; i < kRounds; ++i) EXPECT_FALSE(t->lookup("r" + std::to_string(i))) << i;
  EXPECT_EQ(*read_sync(*t, "r0", 0), "newer");
  EXPECT_EQ(t->object_count(), 1u);
}

TEST(FlashApiTest, RemoveHonoursItsVersionBound) {
  TempDir dir;
  auto t = open_or_die(small_options(dir.file("f")));
  ASSERT_TRUE(t);
  ASSERT_TRUE(write_sync(*t, {.key = "k", .version = 5, .data = "v5"}).is_ok());
  EXPECT_FALSE(t->remove("k", 4));
  EXPECT_TRUE(t->lookup("k"));
  EXPECT_TRUE(t->remove("k", 5));
  EXPECT_FALSE(t->remove("k", 5));
  // The tombstone covers only versions <= 5.
  ASSERT_TRUE(write_sync(*t, {.key = "k", .version = 6, .data = "v6"}).is_ok());
  EXPECT_EQ(*read_sync(*t, "k", 0), "v6");
}

// forget() drops older versions from the index without a tombstone. The
// Store uses it only when the newer version is being made durable
// (fsync=always): on flash that version supersedes them, and a tombstone
// written first could outlive it in a crash and lose the acknowledged older
// version. Without the newer version a restart finds the old one again;
// with it, not.
TEST(FlashApiTest, ForgetDropsOlderVersionsTheNewOneSupersedes) {
  TempDir dir;
  const FlashOptions o = small_options(dir.file("f"));
  {
    auto t = open_or_die(o);
    ASSERT_TRUE(t);
    ASSERT_TRUE(write_sync(*t, {.key = "k", .version = 5, .data = "v5"}).is_ok());
    ASSERT_TRUE(write_sync(*t, {.key = "j", .version = 5, .data = "v5"}).is_ok());
    EXPECT_FALSE(t->forget("k", 5));  // not below 5
    EXPECT_FALSE(t->forget("k", 0));
    EXPECT_FALSE(t->forget("absent", 9));
    EXPECT_TRUE(t->lookup("k"));
    EXPECT_TRUE(t->forget("k", 6));
    EXPECT_TRUE(t->forget("j", 6));
    EXPECT_FALSE(t->lookup("k"));
    EXPECT_EQ(t->object_count(), 0u);
    ASSERT_TRUE(write_sync(*t, {.key = "j", .version = 6, .data = "v6"}).is_ok());
  }
  auto t = open_or_die(o);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->recovery().tombstones, 0u);
  EXPECT_EQ(t->lookup("k")->version, 5u);
  EXPECT_EQ(*read_sync(*t, "j", 0), "v6");
}

// Finding 3 of the trust issue: when an older version's write is in flight
// as the key is overwritten, the older version must not be indexed when it
// lands (else it is served once the newer one leaves memory).
TEST(FlashApiTest, ForgetAndRemoveStopOlderWritesInFlight) {
  TempDir dir;
  FlashOptions o = small_options(dir.file("f"));
  o.backing_latency_ns = 0;
  auto t = open_or_die(o);
  ASSERT_TRUE(t);
  for (int round = 0; round < 200; ++round) {
    const std::string key = "k" + std::to_string(round);
    std::promise<Status> landed;
    ASSERT_TRUE(t->write_chunk({.key = key, .version = 10, .data = "old"}, [&](Status st) {
                   landed.set_value(st);
                 }).is_ok());
    if (round % 2 == 0) {
      t->forget(key, 11);
    } else {
      t->remove(key, 10);
    }
    const Status st = landed.get_future().get();
    EXPECT_TRUE(st.is_ok() || st.code() == StatusCode::kConflict);
    EXPECT_FALSE(t->lookup(key)) << key;
  }
}

TEST(FlashApiTest, ClearIsDurableAndStopsWritesInFlight) {
  TempDir dir;
  FlashOptions o = small_options(dir.file("f"));
  {
    auto t = open_or_die(o);
    ASSERT_TRUE(t);
    // Enough to span several regions, so that clear has several headers to wipe.
    for (int i = 0; i < 40; ++i) {
      ASSERT_TRUE(
          write_sync(*t,
                     {.key = "old" + std::to_string(i), .version = 1, .data = pattern(300'000, i)})
              .is_ok());
    }
    std::atomic<int> callbacks{0};
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(
          t->write_chunk(
               {.key = "flying" + std::to_string(i), .version = 2, .data = pattern(4000, i)},
               [&](Status) { ++callbacks; })
              .is_ok());
    }
    t->clear();
    EXPECT_EQ(callbacks, 20);  // clear waited for them
    EXPECT_EQ(t->object_count(), 0u);
    EXPECT_FALSE(t->lookup("old3"));
    EXPECT_FALSE(t->lookup("flying0"));
    EXPECT_EQ(read_sync(*t, "old3", 0).status().code(), StatusCode::kNotFound);
    EXPECT_EQ(t->stats().regions_used, 0u);
    ASSERT_TRUE(write_sync(*t, {.key = "new", .version = 3, .data = "after"}).is_ok());
    EXPECT_EQ(*read_sync(*t, "new", 0), "after");
  }
  {
    auto t = open_or_die(o);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->object_count(), 1u);
    EXPECT_EQ(*read_sync(*t, "new", 0), "after");
    t->clear();
  }
  // Regions reused after a clear and a restart get seqs above every old one:
  // the old records behind a short new one must not come back.
  {
    auto t = open_or_die(o);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->object_count(), 0u);
    EXPECT_EQ(t->recovery().regions_scanned, 0u);
    ASSERT_TRUE(write_sync(*t, {.key = "fresh", .version = 4, .data = "f"}).is_ok());
  }
  auto t = open_or_die(o);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->object_count(), 1u);
  EXPECT_TRUE(t->lookup("fresh"));
  EXPECT_EQ(t->recovery().records_recovered, 1u);
}

TEST(FlashApiTest, IterationReturnsEveryKeyOnce) {
  TempDir dir;
  auto t = open_or_die(small_options(dir.file("f")));
  ASSERT_TRUE(t);
  EXPECT_FALSE(t->random_key());
  constexpr int kKeys = 500;
  std::vector<ChunkWrite> writes;
  std::vector<std::string> keys;
  for (int i = 0; i < kKeys; ++i) keys.push_back("key:" + std::to_string(i));
  for (int i = 0; i < kKeys; ++i) writes.push_back({.key = keys[i], .version = 1, .data = "v"});
  std::promise<Status> done;
  ASSERT_TRUE(t->write_chunks(writes, [&](Status s) { done.set_value(s); }).is_ok());
  ASSERT_TRUE(done.get_future().get().is_ok());
  EXPECT_EQ(t->object_count(), uint64_t{kKeys});

  std::multiset<std::string> seen;
  ASSERT_GT(t->key_shard_count(), 1u);
  for (size_t s = 0; s < t->key_shard_count(); ++s) {
    for (std::string& k : t->keys_in_shard(s)) seen.insert(std::move(k));
  }
  EXPECT_TRUE(t->keys_in_shard(t->key_shard_count()).empty());
  EXPECT_EQ(seen.size(), size_t{kKeys});
  for (const std::string& k : keys) EXPECT_EQ(seen.count(k), 1u) << k;

  // random_key: always a live key, and spread over many of them.
  for (int i = 0; i < 250; ++i) EXPECT_TRUE(t->remove(keys[i], 1));
  std::set<std::string> sampled;
  for (int i = 0; i < 2000; ++i) {
    std::optional<std::string> k = t->random_key();
    ASSERT_TRUE(k);
    ASSERT_TRUE(t->lookup(*k)) << *k;
    sampled.insert(*k);
  }
  EXPECT_GT(sampled.size(), 200u);
  for (int i = 250; i < kKeys; ++i) EXPECT_TRUE(t->forget(keys[i], 2));
  EXPECT_FALSE(t->random_key());
  EXPECT_EQ(t->object_count(), 0u);
}

TEST(FlashApiTest, ContainsObjectNeedsEveryChunkOfTheVersion) {
  TempDir dir;
  auto t = open_or_die(small_options(dir.file("f")));
  ASSERT_TRUE(t);
  for (uint32_t c = 0; c < 2; ++c) {
    ASSERT_TRUE(
        write_sync(*t, {.key = "o", .chunk_index = c, .version = 4, .chunk_count = 3, .data = "c"})
            .is_ok());
  }
  EXPECT_TRUE(t->contains_object("o", 4, 2));
  EXPECT_FALSE(t->contains_object("o", 4, 3));
  EXPECT_FALSE(t->contains_object("o", 3, 2));
  EXPECT_FALSE(t->contains_object("other", 4, 1));
  ASSERT_TRUE(
      write_sync(*t, {.key = "o", .chunk_index = 2, .version = 4, .chunk_count = 3, .data = "c"})
          .is_ok());
  EXPECT_TRUE(t->contains_object("o", 4, 3));
  EXPECT_FALSE(t->contains_object("o", 4, 4));
  EXPECT_TRUE(t->contains_object("o", 4, 0));
}

// A file from format 2 (no superblock; region headers of format 2): its
// regions are rejected, counted, the tier starts empty and works on.
TEST(FlashApiTest, OlderFormatFilesStartEmpty) {
  TempDir dir;
  const FlashOptions o = small_options(dir.file("f"));
  {
    auto t = open_or_die(o);
    ASSERT_TRUE(t);
    ASSERT_TRUE(write_sync(*t, {.key = "k", .version = 1, .data = "old"}).is_ok());
  }
  // Wipe the superblocks and stamp the first region's header as format 2.
  const int fd = ::open(dir.file("f").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const std::string zeros(kDataStart, '\0');
  ASSERT_EQ(::pwrite(fd, zeros.data(), zeros.size(), 0), static_cast<ssize_t>(zeros.size()));
  RegionHeader h;
  ASSERT_EQ(::pread(fd, &h, sizeof(h), kDataStart), static_cast<ssize_t>(sizeof(h)));
  ASSERT_EQ(h.magic, kRegionMagic);
  h.format_version = 2;
  h.checksum = 0;
  h.checksum = XXH3_64bits(&h, sizeof(h));
  ASSERT_EQ(::pwrite(fd, &h, sizeof(h), kDataStart), static_cast<ssize_t>(sizeof(h)));
  ::close(fd);

  auto t = open_or_die(o);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->recovery().regions_old_format, 1u);
  EXPECT_EQ(t->recovery().regions_corrupt, 0u);
  EXPECT_FALSE(t->lookup("k"));
  ASSERT_TRUE(write_sync(*t, {.key = "k", .version = 2, .data = "new"}).is_ok());
  EXPECT_EQ(*read_sync(*t, "k", 0), "new");
}

}  // namespace
}  // namespace tierkv::flash
