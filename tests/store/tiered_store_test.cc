// The Store over both tiers: offload on eviction, reads from flash (in
// order, whole or ranged), promotion, versions across tiers, removal,
// restart, write-through, durable writes, and a flash tier that cannot open.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <random>
#include <set>
#include <thread>

#include "core/clock.h"
#include "flash/flash_tier.h"
#include "store/store.h"
#include "store/store_tiers.h"
#include "tests/store/store_test_util.h"

namespace tierkv {
namespace {

using testing::TempDir;
using testing::value_for;

std::string key_for(int i) {
  std::string k = "key:";
  k += std::to_string(i);
  return k;
}

class TieredStoreTest : public ::testing::Test {
 protected:
  Config config() const {
    Config c;
    c.memory = 8 << 20;
    c.chunk_size = 64 << 10;
    c.memory_shards = 4;
    c.active_expire_hz = 0;
    c.flash_path = dir_.file("flash.dat");
    c.flash_size = 64 << 20;
    c.region_size = 1 << 20;
    c.flash_preallocate = false;
    return c;
  }
  std::unique_ptr<Store> open(const Config& c) {
    auto s = Store::open(c);
    EXPECT_TRUE(s) << s.status().to_string();
    return s ? std::move(*s) : nullptr;
  }
  // Writes `n` values of `size` bytes, checking the budget after each.
  void fill(Store& store, int n, size_t size, int first = 0) {
    for (int i = first; i < first + n; ++i) {
      auto r = store.put(key_for(i), value_for(i, size));
      ASSERT_TRUE(r) << r.status().to_string();
      ASSERT_LE(StoreTiers::memory(store).used_bytes(), StoreTiers::memory(store).budget_bytes());
    }
  }
  // Waits until every offload has landed and left memory (a promotion never
  // waits for room, so tests that expect one make room first).
  // Background writeback copies count too (one whose record is indexed on
  // flash but whose memory object is not yet marked clean counts in both
  // tiers), and writeback starts its next batch as one lands: quiet means
  // nothing in flight at two looks, more than writeback's poll apart.
  void settle(Store& store) {
    StoreTiers::flash(store)->flush();
    auto busy = [&] {
      StoreStats st = store.stats();
      return st.memory.offloads_inflight > 0 || st.writeback_inflight_bytes > 0;
    };
    int quiet = 0;
    for (int i = 0; i < 500 && quiet < 2; ++i) {
      quiet = busy() ? 0 : quiet + 1;
      if (quiet < 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_EQ(quiet, 2) << "offloads or writeback still in flight after 10 s";
  }
  void expect_value(Store& store, int i, size_t size) {
    auto v = store.get(key_for(i));
    ASSERT_TRUE(v) << key_for(i) << ": " << v.status().to_string();
    EXPECT_EQ(v->to_string(), value_for(i, size)) << key_for(i);
  }

  TempDir dir_;
};

TEST_F(TieredStoreTest, EvictedObjectsAreOffloadedAndStayReadable) {
  auto store = open(config());
  ASSERT_TRUE(store->flash_status().enabled) << store->flash_status().error;
  fill(*store, 300, 100 << 10);  // 30 MiB through an 8 MiB memory
  StoreStats st = store->stats();
  // Written down when evicted dirty, or before (background writeback).
  const uint64_t written_back =
      store->metrics().counter("tierkv_writeback_objects_total", "").value();
  EXPECT_GT(st.memory.offloads + written_back, 200u);
  EXPECT_EQ(st.memory.offload_dropped, 0u);
  for (int i = 0; i < 300; ++i) expect_value(*store, i, 100 << 10);
  EXPECT_GT(store->stats().flash_hits, 0u);
  settle(*store);
  EXPECT_EQ(store->size(), 300u);
}

TEST_F(TieredStoreTest, ReadDeliversFlashPiecesInOrder) {
  auto store = open(config());
  const size_t size = 10 * (64 << 10) + 123;
  fill(*store, 1, size);
  fill(*store, 200, 64 << 10, 1);  // pushes key 0 out to flash
  settle(*store);                  // a read during the offload is served from memory
  ASSERT_FALSE(store->read_resident(key_for(0), ResidentRead::look()));
  std::promise<Status> done;
  std::string got;
  ReadStart start = store->read(
      key_for(0), 0, UINT64_MAX,
      {[&](ValuePiece p) { got.append(p.bytes); }, [&](Status s) { done.set_value(s); }});
  ASSERT_EQ(start.where, ReadStart::Where::kFlash);
  EXPECT_EQ(start.length, size);
  EXPECT_TRUE(done.get_future().get().is_ok());
  EXPECT_EQ(got, value_for(0, size));
}

TEST_F(TieredStoreTest, RangeReadsFromFlash) {
  auto store = open(config());
  const size_t size = 5 * (64 << 10);
  fill(*store, 1, size);
  fill(*store, 200, 64 << 10, 1);
  settle(*store);
  ASSERT_FALSE(store->read_resident(key_for(0), ResidentRead::look()));
  auto v = store->get(key_for(0), 70000, 100000);
  ASSERT_TRUE(v) << v.status().to_string();
  EXPECT_EQ(v->to_string(), value_for(0, size).substr(70000, 100000));
}

TEST_F(TieredStoreTest, SecondFlashHitPromotesToMemory) {
  auto store = open(config());
  fill(*store, 1, 200 << 10);
  fill(*store, 200, 64 << 10, 1);
  settle(*store);
  ASSERT_FALSE(store->read_resident(key_for(0), ResidentRead::look()));
  expect_value(*store, 0, 200 << 10);  // first hit: counted only
  EXPECT_FALSE(store->read_resident(key_for(0), ResidentRead::look()));
  expect_value(*store, 0, 200 << 10);  // second hit: copied while read
  // The copy is installed just after the read completes.
  for (int i = 0; i < 200 && !store->read_resident(key_for(0), ResidentRead::look()); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(store->metrics().counter("tierkv_promotions_failed_total", "").value(), 0u)
      << "memory used " << store->stats().memory.used_bytes << " of "
      << store->stats().memory.budget_bytes << ", offloading "
      << store->stats().memory.offloading_bytes;
  auto r = store->residency(key_for(0));
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->in_memory);
  EXPECT_EQ(r->state, "clean");
  for (const ChunkResidency& c : r->chunks) EXPECT_TRUE(c.in_memory && c.on_flash);
  EXPECT_EQ(store->metrics().counter("tierkv_promotions_done_total", "").value(), 1u);
}

TEST_F(TieredStoreTest, OverwriteWhileOldVersionIsOnFlash) {
  auto store = open(config());
  fill(*store, 1, 100 << 10);
  fill(*store, 200, 64 << 10, 1);
  settle(*store);
  ASSERT_FALSE(store->read_resident(key_for(0), ResidentRead::look()));
  ASSERT_TRUE(store->put(key_for(0), "new"));
  EXPECT_EQ(store->get(key_for(0))->to_string(), "new");
  fill(*store, 200, 64 << 10, 1000);  // the new version goes to flash too
  EXPECT_EQ(store->get(key_for(0))->to_string(), "new");
  settle(*store);  // an object whose offload is landing counts in both tiers
  EXPECT_EQ(store->size(), 401u);
}

TEST_F(TieredStoreTest, RemovedKeysNeverComeBack) {
  {
    auto store = open(config());
    fill(*store, 100, 64 << 10);
    for (int i = 0; i < 100; i += 2) EXPECT_TRUE(store->remove(key_for(i)));
    for (int i = 0; i < 100; ++i) {
      if (i % 2 == 0)
        EXPECT_FALSE(store->get(key_for(i))) << i;
      else
        expect_value(*store, i, 64 << 10);
    }
    ASSERT_TRUE(store->persist_all().is_ok());
  }
  auto store = open(config());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(store->exists(key_for(i)), i % 2 == 1) << i;
}

TEST_F(TieredStoreTest, RestartRecoversAndVersionsKeepRising) {
  uint64_t max_version = 0;
  {
    auto store = open(config());
    fill(*store, 200, 50 << 10);
    max_version = StoreTiers::memory(*store).max_version();
    ASSERT_TRUE(store->persist_all().is_ok());
  }
  auto store = open(config());
  for (int i = 0; i < 200; ++i) expect_value(*store, i, 50 << 10);
  auto w = store->put("fresh", "x");
  ASSERT_TRUE(w);
  EXPECT_GT(w->version, max_version);
}

TEST_F(TieredStoreTest, WriteThroughCopiesEveryWrite) {
  Config c = config();
  c.offload_policy = OffloadPolicy::kWriteThrough;
  auto store = open(c);
  ASSERT_TRUE(store->put("k", value_for(1, 100000)));
  StoreTiers::flash(*store)->flush();
  auto r = store->residency("k");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->state, "clean");
  for (const ChunkResidency& ch : r->chunks) EXPECT_TRUE(ch.on_flash);
}

TEST_F(TieredStoreTest, DurableWritesSurviveWithoutShutdownFlush) {
  Config c = config();
  c.flash_fsync = FlashFsync::kAlways;
  {
    auto store = open(c);
    ASSERT_TRUE(store->durable_writes());
    for (int i = 0; i < 20; ++i) {
      auto w = store->put(key_for(i), value_for(i, 30000));
      ASSERT_TRUE(w);
      std::promise<Status> p;
      store->persist(key_for(i), w->version, [&](Status s) { p.set_value(s); });
      ASSERT_TRUE(p.get_future().get().is_ok());
    }
  }  // no persist_all(): only what persist() made durable is on flash
  auto store = open(c);
  for (int i = 0; i < 20; ++i) expect_value(*store, i, 30000);
}

// The full-queue path of durable writes, forced deterministically: a write
// whose callback blocks holds the flash tier's (single) io_uring completion
// thread, so the next write's landing cannot be reaped and its bytes stay in
// the write queue; every persist after it must find the queue full (Busy),
// wait, and be acknowledged, durably, once the gate opens.
TEST_F(TieredStoreTest, DurableWritesWaitOutAFullWriteQueue) {
  Config c = config();
  c.flash_fsync = FlashFsync::kAlways;
  c.flash_write_queue = 1 << 20;  // the minimum
  constexpr int kWaiting = 16;
  {
    auto store = open(c);
    flash::FlashTier* flash = StoreTiers::flash(*store);
    ASSERT_NE(flash, nullptr);
    // With the thread pool, another worker would reap the landings: the
    // gate below cannot hold them, so the full queue cannot be forced.
    if (flash->io_backend() != "io_uring") {
      GTEST_SKIP() << "needs the io_uring backend (one completion thread to block); this host "
                   << "runs the flash tier on '" << flash->io_backend() << "'";
    }
    std::promise<void> entered;
    // Opens the gate however the test leaves this scope (a failed ASSERT
    // must not leave the completion thread blocked in the store's destructor).
    struct Gate {
      std::promise<void> release;
      std::shared_future<void> opened = release.get_future().share();
      bool open = false;
      void set() {
        if (!open) release.set_value();
        open = true;
      }
      ~Gate() { set(); }
    } gate_keeper;
    std::shared_future<void> gate = gate_keeper.opened;
    ASSERT_TRUE(flash
                    ->write_chunk({.key = "gate", .version = 1, .data = value_for(-1, 4096)},
                                  [&entered, gate](Status) {
                                    entered.set_value();
                                    gate.wait();
                                  })
                    .is_ok());
    ASSERT_EQ(entered.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
    const uint64_t busy_before = store->metrics().counter("tierkv_offload_busy_total", "").value();

    // 900 KiB accepted into the empty queue; its landing is stuck behind the gate.
    std::vector<std::future<Status>> acks;
    auto persist = [&](int i, size_t size) {
      auto w = store->put(key_for(i), value_for(i, size));
      ASSERT_TRUE(w) << w.status().to_string();
      auto p = std::make_shared<std::promise<Status>>();
      acks.push_back(p->get_future());
      store->persist(key_for(i), w->version, [p](Status s) { p->set_value(s); });
    };
    persist(0, 900 << 10);
    // Each of these would take the queue past 1 MiB: refused, so they wait.
    for (int i = 1; i <= kWaiting; ++i) persist(i, 200 << 10);
    EXPECT_GE(store->metrics().counter("tierkv_offload_busy_total", "").value() - busy_before,
              static_cast<uint64_t>(kWaiting));
    for (int i = 0; i <= kWaiting; ++i) {
      EXPECT_EQ(acks[i].wait_for(std::chrono::seconds(0)), std::future_status::timeout)
          << "persist " << i << " acknowledged before its write could land";
    }

    gate_keeper.set();
    for (int i = 0; i <= kWaiting; ++i) {
      ASSERT_EQ(acks[i].wait_for(std::chrono::seconds(60)), std::future_status::ready) << i;
      EXPECT_TRUE(acks[i].get().is_ok()) << i;
    }
  }  // no persist_all(): only what persist() made durable is on flash
  auto store = open(c);
  expect_value(*store, 0, 900 << 10);
  for (int i = 1; i <= kWaiting; ++i) expect_value(*store, i, 200 << 10);
}

TEST_F(TieredStoreTest, UnopenableFlashLeavesAMemoryStore) {
  Config c = config();
  c.flash_path = "/proc/self/no-such-dir/flash.dat";
  auto store = open(c);
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->flash_status().enabled);
  EXPECT_FALSE(store->flash_status().error.empty());
  ASSERT_TRUE(store->put("k", "v"));
  EXPECT_EQ(store->get("k")->to_string(), "v");
}

TEST_F(TieredStoreTest, ExpiryAppliesToFlashCopies) {
  auto store = open(config());
  fill(*store, 1, 64 << 10);
  fill(*store, 200, 64 << 10, 1);
  settle(*store);
  ASSERT_FALSE(store->read_resident(key_for(0), ResidentRead::look()));
  int64_t soon = unix_time_ms() + 60000;
  EXPECT_TRUE(store->set_expiry(key_for(0), soon));
  EXPECT_EQ(store->stat(key_for(0))->expire_at_ms, soon);
  EXPECT_TRUE(store->set_expiry(key_for(0), unix_time_ms() - 1));
  EXPECT_FALSE(store->exists(key_for(0)));
  EXPECT_FALSE(store->get(key_for(0)));
}

TEST_F(TieredStoreTest, ConditionalWritesSeeFlashOnlyKeys) {
  auto store = open(config());
  fill(*store, 1, 64 << 10);
  fill(*store, 200, 64 << 10, 1);
  settle(*store);
  ASSERT_FALSE(store->read_resident(key_for(0), ResidentRead::look()));
  auto nx = store->put(key_for(0), "nx", WriteOptions{.condition = WriteCondition::kIfAbsent});
  ASSERT_TRUE(nx);
  EXPECT_FALSE(nx->written);
  auto xx = store->put(key_for(0), "xx", WriteOptions{.condition = WriteCondition::kIfPresent});
  ASSERT_TRUE(xx);
  EXPECT_TRUE(xx->written);
  EXPECT_EQ(store->get(key_for(0))->to_string(), "xx");
}

TEST_F(TieredStoreTest, ScanCoversBothTiersOnce) {
  auto store = open(config());
  fill(*store, 300, 40 << 10);
  std::multiset<std::string> seen;
  uint64_t cursor = 0;
  int pages = 0;
  do {
    ScanPage page = store->scan(cursor, 10);
    seen.insert(page.keys.begin(), page.keys.end());
    cursor = page.next_cursor;
  } while (cursor != 0 && ++pages < 10000);
  EXPECT_EQ(seen.size(), 300u);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(seen.count(key_for(i)), 1u) << i;
}

TEST_F(TieredStoreTest, ScanPagesOfAFlashOnlyKeySpaceAreBounded) {
  {
    auto store = open(config());
    for (int i = 0; i < 3000; ++i) ASSERT_TRUE(store->put(key_for(i), "v"));
    ASSERT_TRUE(store->persist_all().is_ok());
  }
  // After a restart every key is on flash and memory is empty: a page must
  // still hold about `count` keys, not the whole flash index.
  auto store = open(config());
  ASSERT_EQ(StoreTiers::memory(*store).object_count(), 0u);
  for (size_t count : {1u, 10u, 100u}) {
    std::multiset<std::string> seen;
    uint64_t cursor = 0;
    int pages = 0;
    do {
      ScanPage page = store->scan(cursor, count);
      EXPECT_LE(page.keys.size(), count);
      seen.insert(page.keys.begin(), page.keys.end());
      cursor = page.next_cursor;
    } while (cursor != 0 && ++pages < 100000);
    ASSERT_EQ(seen.size(), 3000u) << count;
    for (int i = 0; i < 3000; ++i) ASSERT_EQ(seen.count(key_for(i)), 1u) << i;
  }
}

TEST_F(TieredStoreTest, FetchBringsFlashObjectsIntoMemory) {
  auto store = open(config());
  fill(*store, 1, 64 << 10);
  fill(*store, 200, 64 << 10, 1);
  settle(*store);
  ASSERT_TRUE(store->needs_flash(key_for(0)));
  std::string_view keys[] = {key_for(0), "absent"};
  std::string k0 = key_for(0);
  keys[0] = k0;
  std::promise<Status> p;
  store->fetch(keys, [&](Status s) { p.set_value(s); });
  EXPECT_TRUE(p.get_future().get().is_ok());
  EXPECT_FALSE(store->needs_flash(key_for(0)));
  auto v = store->read_resident(key_for(0), ResidentRead::look());
  ASSERT_TRUE(v);
  EXPECT_EQ(v->to_string(), value_for(0, 64 << 10));
}

TEST_F(TieredStoreTest, RemoveRacingOffloadNeverResurrects) {
  auto store = open(config());
  // Each round writes a victim, pushes it out (its offload may still be in
  // flight) and removes it at once.
  for (int round = 0; round < 50; ++round) {
    std::string victim = "victim" + std::to_string(round);
    ASSERT_TRUE(store->put(victim, value_for(round, 64 << 10)));
    fill(*store, 20, 64 << 10, 10000 + round * 20);
    store->remove(victim);
    EXPECT_FALSE(store->exists(victim)) << round;
  }
  StoreTiers::flash(*store)->flush();
  for (int round = 0; round < 50; ++round)
    EXPECT_FALSE(store->exists("victim" + std::to_string(round))) << round;
}

// read_resident(): a counted read answers Busy for a value only flash has
// (the caller fetches it) and counts hits and misses; a look answers
// NotFound and counts nothing.
TEST_F(TieredStoreTest, ResidentReadsCountWhatTheyAreAskedTo) {
  auto store = open(config());
  fill(*store, 1, 64 << 10);
  fill(*store, 200, 64 << 10, 1);
  settle(*store);
  const StoreStats before = store->stats();
  EXPECT_EQ(store->read_resident(key_for(0), ResidentRead::look()).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(store->read_resident("absent", ResidentRead::look()).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(store->stats().hits, before.hits);
  EXPECT_EQ(store->stats().misses, before.misses);
  EXPECT_EQ(store->read_resident(key_for(0)).status().code(), StatusCode::kBusy);
  EXPECT_EQ(store->read_resident("absent").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->stats().misses, before.misses + 1);
  auto part = store->read_resident(key_for(200), ResidentRead::range(10, 5));
  ASSERT_TRUE(part) << part.status().to_string();
  EXPECT_EQ(part->to_string(), value_for(200, 64 << 10).substr(10, 5));
  EXPECT_EQ(store->stats().hits, before.hits + 1);
}

}  // namespace
}  // namespace tierkv
