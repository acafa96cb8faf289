// Prefetch on exist through the Store: the probe answers exactly as a plain
// probe and from the indexes alone; flash-only keys it names come into
// memory, leased until their first read; plain probes never promote; the
// companion map; the leased-bytes cap; room only from clean memory (dirty
// memory means a cooldown and an early exit); the demand kick; and
// promotion-on-hit off. Each outcome counter is read.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "flash/flash_tier.h"
#include "flash/io_engine.h"
#include "store/prefetch/prefetch_window.h"
#include "store/store.h"
#include "store/store_tiers.h"
#include "tests/store/store_test_util.h"

namespace tierkv {
namespace {

using testing::TempDir;
using testing::value_for;

constexpr size_t kValue = 256 << 10;

std::string key_for(int i) {
  return "obj:" + std::to_string(i);
}

// Stands between the flash tier and its engine: while armed, holds every
// read (writes pass), so that a test decides when and how they end.
class ReadGate final : public flash::IoEngine {
 public:
  explicit ReadGate(std::unique_ptr<flash::IoEngine> inner) : inner_(std::move(inner)) {}
  void submit(std::span<flash::IoRequest* const> requests) override {
    std::vector<flash::IoRequest*> now;
    {
      std::lock_guard lock(mu_);
      for (flash::IoRequest* r : requests) {
        if (r->op == flash::IoRequest::Op::kRead) ++reads_;
        if (armed_ && r->op == flash::IoRequest::Op::kRead) {
          held_.push_back(r);
        } else {
          now.push_back(r);
        }
      }
    }
    if (!now.empty()) inner_->submit(now);
  }
  std::string_view name() const override { return inner_->name(); }
  void arm() {
    std::lock_guard lock(mu_);
    armed_ = true;
  }
  size_t held() {
    std::lock_guard lock(mu_);
    return held_.size();
  }
  size_t reads() {
    std::lock_guard lock(mu_);
    return reads_;
  }
  // Disarms; the held reads go to the device.
  void release_held() {
    std::vector<flash::IoRequest*> go;
    {
      std::lock_guard lock(mu_);
      armed_ = false;
      go.swap(held_);
    }
    if (!go.empty()) inner_->submit(go);
  }
  // Sends the first n held reads to the device; the gate stays armed.
  void release_first(size_t n) {
    std::vector<flash::IoRequest*> go;
    {
      std::lock_guard lock(mu_);
      n = std::min(n, held_.size());
      go.assign(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(n));
      held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(n));
    }
    if (!go.empty()) inner_->submit(go);
  }
  // Disarms; the held reads fail as a device error would (EIO).
  void fail_held() {
    std::vector<flash::IoRequest*> fail;
    {
      std::lock_guard lock(mu_);
      armed_ = false;
      fail.swap(held_);
    }
    for (flash::IoRequest* r : fail) r->on_complete(-EIO);
  }

 private:
  std::unique_ptr<flash::IoEngine> inner_;
  std::mutex mu_;
  bool armed_ = false;
  size_t reads_ = 0;
  std::vector<flash::IoRequest*> held_;
};

class PrefetchTest : public ::testing::Test {
 protected:
  Config config() const {
    Config c;
    c.memory = 8 << 20;
    c.chunk_size = 64 << 10;
    c.memory_shards = 4;
    c.active_expire_hz = 0;
    c.flash_path = dir_.file("flash.dat");
    c.flash_size = 128 << 20;
    c.region_size = 1 << 20;
    c.flash_preallocate = false;
    c.promotion_on_hit = false;  // only the triggers under test promote
    return c;
  }
  std::unique_ptr<Store> open(const Config& c) {
    auto s = Store::open(c);
    EXPECT_TRUE(s) << s.status().to_string();
    return s ? std::move(*s) : nullptr;
  }
  // Keys 0..n-1 of kValue bytes, then others until they have all left
  // memory (a slow flash writer keeps fillers dirty, and then more are
  // needed); returns once every offload has landed.
  void fill_to_flash(Store& store, int n) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(store.put(key_for(i), value_for(i, kValue)));
    auto all_on_flash = [&] {
      StoreTiers::flash(store)->flush();
      for (int i = 0; i < 500 && store.stats().memory.offloads_inflight > 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      for (int i = 0; i < n; ++i)
        if (!store.needs_flash(key_for(i))) return false;
      return true;
    };
    fillers_ = 0;
    while (fillers_ < 64 || !all_on_flash()) {
      ASSERT_LT(fillers_, 1024) << "the first keys never left memory";
      for (int j = 0; j < 16; ++j, ++fillers_)
        ASSERT_TRUE(store.put(key_for(n + fillers_), value_for(n + fillers_, kValue)));
    }
  }
  // Drops every clean object, so memory has free room for prefetches.
  void free_memory(Store& store, int n) {
    for (int i = n; i < n + fillers_; ++i) store.remove(key_for(i));
  }
  int fillers_ = 0;
  uint64_t counter(Store& store, const std::string& name) {
    return store.metrics().counter(name, "").value();
  }
  // Polls (bounded) until `pred` holds.
  template <typename Pred>
  bool eventually(Pred pred) {
    for (int i = 0; i < 300; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return pred();
  }

  TempDir dir_;
};

TEST_F(PrefetchTest, ProbeAnswersLikeExistsAndPromotesFlashOnlyKeys) {
  auto store = open(config());
  fill_to_flash(*store, 4);
  free_memory(*store, 4);
  std::vector<std::string_view> keys = {"obj:0", "obj:1", "missing", "obj:2"};
  std::vector<bool> plain = store->exist(keys);
  std::vector<bool> probed = store->exist(keys, ExistOptions{.prefetch_to_memory = true});
  EXPECT_EQ(plain, probed);
  EXPECT_EQ(probed, (std::vector<bool>{true, true, false, true}));
  ASSERT_TRUE(eventually([&] { return counter(*store, "tierkv_prefetch_promoted_total") == 3; }));
  EXPECT_EQ(counter(*store, "tierkv_prefetch_requested_total"), 4u);
  EXPECT_EQ(counter(*store, "tierkv_prefetch_absent_total"), 1u);
  EXPECT_EQ(counter(*store, "tierkv_prefetch_queued_total"), 3u);
  EXPECT_EQ(counter(*store, "tierkv_prefetch_promoted_bytes_total"), 3 * kValue);
  for (int i = 0; i < 3; ++i) {
    auto r = store->residency(key_for(i));
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->in_memory) << key_for(i);
    EXPECT_EQ(r->state, "clean");
    for (const ChunkResidency& c : r->chunks) EXPECT_TRUE(c.leased) << "prefetch lease";
  }
  // The first read consumes the lease and counts as served by prefetch.
  const uint64_t flash_hits = store->stats().flash_hits;
  auto v = store->get(key_for(0));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->to_string(), value_for(0, kValue));
  EXPECT_EQ(store->stats().flash_hits, flash_hits) << "served from memory";
  EXPECT_EQ(store->stats().memory.prefetch_reads, 1u);
  auto r = store->residency(key_for(0));
  for (const ChunkResidency& c : r->chunks) EXPECT_FALSE(c.leased) << "the read ended the lease";
  // A second probe of a key now in memory queues nothing.
  store->exist(keys, ExistOptions{.prefetch_to_memory = true});
  EXPECT_EQ(counter(*store, "tierkv_prefetch_queued_total"), 3u);
  EXPECT_GE(counter(*store, "tierkv_prefetch_in_memory_total"), 3u);
}

// Zero-copy install: each chunk a promotion reads becomes the memory chunk
// (its buffer is kept), so no value byte is copied; the bytes still match.
// The prefetches come from Store::prefetch, the half of a probe that the
// server runs after the reply.
TEST_F(PrefetchTest, APromotionKeepsItsReadBuffersAsTheMemoryChunks) {
  auto store = open(config());
  fill_to_flash(*store, 3);
  free_memory(*store, 3);
  std::vector<std::string_view> keys = {"obj:0", "obj:1", "obj:2"};
  store->prefetch(keys, ExistOptions{.prefetch_to_memory = true});
  ASSERT_TRUE(eventually([&] { return counter(*store, "tierkv_prefetch_promoted_total") == 3; }));
  EXPECT_EQ(counter(*store, "tierkv_promotion_bytes_adopted_total"), 3 * kValue);
  EXPECT_EQ(counter(*store, "tierkv_promotion_bytes_copied_total"), 0u);
  const uint64_t flash_hits = store->stats().flash_hits;
  for (int i = 0; i < 3; ++i) {
    auto v = store->get(key_for(i));
    ASSERT_TRUE(v);
    EXPECT_EQ(v->to_string(), value_for(i, kValue)) << key_for(i);
  }
  EXPECT_EQ(store->stats().flash_hits, flash_hits) << "served from memory";
  // The reads took pooled buffers that earlier evictions gave back.
  EXPECT_GT(store->stats().memory.buffer_pool.reused, 0u);
}

TEST_F(PrefetchTest, PlainProbesNeverPromote) {
  auto store = open(config());
  fill_to_flash(*store, 4);
  free_memory(*store, 4);
  for (int round = 0; round < 5; ++round) {
    std::vector<std::string_view> keys = {"obj:0", "obj:1", "obj:2", "obj:3"};
    EXPECT_EQ(store->exist(keys), std::vector<bool>(4, true));
    EXPECT_EQ(store->exist(keys, store->plain_exists_options()), std::vector<bool>(4, true));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(store->needs_flash(key_for(i))) << key_for(i);
  EXPECT_EQ(counter(*store, "tierkv_promotions_attempted_total"), 0u);
  EXPECT_EQ(counter(*store, "tierkv_prefetch_requested_total"), 0u);
}

TEST_F(PrefetchTest, ExistsPrefetchAndTheCompanionMapServeUnchangedClients) {
  Config c = config();
  auto store = open(c);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(store->put("chunk" + std::to_string(i) + "metadata", "m"));
    ASSERT_TRUE(store->put("chunk" + std::to_string(i) + "kv_bytes", value_for(i, kValue)));
  }
  for (int i = 10; i < 80; ++i) ASSERT_TRUE(store->put(key_for(i), value_for(i, kValue)));
  StoreTiers::flash(*store)->flush();
  ASSERT_TRUE(eventually([&] { return store->stats().memory.offloads_inflight == 0; }));
  for (int i = 10; i < 80; ++i) store->remove(key_for(i));
  ASSERT_TRUE(store->needs_flash("chunk0kv_bytes"));
  // The map alone: EXISTS on the metadata key prefetches the data key.
  c.exists_prefetch_map = {{"metadata", "kv_bytes"}};
  ASSERT_TRUE(store->apply_config(ConfigApply::kPrefetch, c).is_ok());
  std::string_view meta = "chunk0metadata";
  EXPECT_EQ(store->exist(std::span(&meta, 1), store->plain_exists_options())[0], true);
  ASSERT_TRUE(eventually([&] { return !store->needs_flash("chunk0kv_bytes"); }));
  EXPECT_TRUE(store->needs_flash("chunk1kv_bytes")) << "only the probed chunk's data";
  // exists-prefetch: a plain probe of the data key itself prefetches it.
  c.exists_prefetch_map.clear();
  c.exists_prefetch = true;
  ASSERT_TRUE(store->apply_config(ConfigApply::kPrefetch, c).is_ok());
  std::string_view data = "chunk1kv_bytes";
  EXPECT_TRUE(store->exist(std::span(&data, 1), store->plain_exists_options())[0]);
  ASSERT_TRUE(eventually([&] { return !store->needs_flash("chunk1kv_bytes"); }));
  EXPECT_TRUE(store->needs_flash("chunk2kv_bytes"));
}

TEST_F(PrefetchTest, LeasedBytesStayUnderTheCap) {
  Config c = config();
  c.lease_max_fraction = 0.1;  // 819 KiB of 8 MiB: three 256 KiB objects
  auto store = open(c);
  fill_to_flash(*store, 10);
  free_memory(*store, 10);
  std::vector<std::string_view> keys;
  std::vector<std::string> names;
  for (int i = 0; i < 10; ++i) names.push_back(key_for(i));
  for (const std::string& n : names) keys.push_back(n);
  store->exist(keys, ExistOptions{.prefetch_to_memory = true});
  ASSERT_TRUE(eventually([&] {
    return counter(*store, "tierkv_prefetch_promoted_total") +
               counter(*store, "tierkv_prefetch_refused_lease_cap_total") ==
           10;
  }));
  EXPECT_GE(counter(*store, "tierkv_prefetch_refused_lease_cap_total"), 7u);
  EXPECT_LE(store->stats().memory.leased_bytes, StoreTiers::memory(*store).lease_cap_bytes());
}

// The expiry thread ends leases that ran out unread, so the wasted count
// and the leased bytes are right even when eviction never reaches the
// object (as in S3-FIFO's main queue under a scan).
TEST_F(PrefetchTest, ExpiredLeasesEndWithoutEviction) {
  Config c = config();
  c.lease_ttl_ms = 50;
  c.active_expire_hz = 50;
  c.dirty_max_fraction = 1;  // no writeback walk (it too ends leases it meets)
  auto store = open(c);
  fill_to_flash(*store, 2);
  free_memory(*store, 2);
  std::vector<std::string> names = {key_for(0), key_for(1)};
  std::vector<std::string_view> keys(names.begin(), names.end());
  store->exist(keys, ExistOptions{.prefetch_to_memory = true});
  ASSERT_TRUE(
      eventually([&] { return !store->needs_flash(keys[0]) && !store->needs_flash(keys[1]); }));
  const uint64_t evicted = store->stats().memory.evicted_objects;
  ASSERT_TRUE(eventually([&] { return store->stats().memory.prefetch_wasted == 2; }))
      << store->stats().memory.prefetch_wasted;
  EXPECT_EQ(store->stats().memory.leased_bytes, 0);
  EXPECT_EQ(store->stats().memory.evicted_objects, evicted);
  EXPECT_TRUE(StoreTiers::memory(*store).contains(keys[0]));  // unleased, still held
}

TEST_F(PrefetchTest, LeaseExpiryMakesThePrefetchEvictableAndCountsItWasted) {
  Config c = config();
  c.lease_ttl_ms = 50;
  // LRU: the fill below is a scan, and S3-FIFO rightly keeps an object that
  // entered its main queue (a ghost hit, depending on which fillers the
  // offloads let go first) out of a scan's reach, leased or not.
  c.eviction_policy = EvictionPolicyKind::kLru;
  auto store = open(c);
  fill_to_flash(*store, 1);
  free_memory(*store, 1);
  std::string_view k = "obj:0";
  store->exist(std::span(&k, 1), ExistOptions{.prefetch_to_memory = true});
  ASSERT_TRUE(eventually([&] { return !store->needs_flash(k); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  // Fill memory again: the expired lease no longer protects the object.
  for (int i = 100; i < 180; ++i) ASSERT_TRUE(store->put(key_for(i), value_for(i, kValue)));
  ASSERT_TRUE(eventually([&] { return store->needs_flash(k); })) << [&] {
    auto m = store->stats().memory;
    auto info = StoreTiers::memory(*store).stat(k);
    return fmt::format(
        "still held in memory: state {} chunks {}; used {} of {}, leased {}, evicted {} objects "
        "{} chunks, offloads {} inflight {}, expired unread {}",
        info ? static_cast<int>(info->flash_state) : -1, info ? info->chunks.size() : 0,
        m.used_bytes, m.budget_bytes, m.leased_bytes, m.evicted_objects, m.evicted_chunks,
        m.offloads, m.offloads_inflight, m.lease_expired_unread);
  }();
  EXPECT_EQ(store->stats().memory.prefetch_wasted, 1u);
  EXPECT_EQ(store->stats().memory.prefetch_reads, 0u);
  auto v = store->get(k);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->to_string(), value_for(0, kValue));
}

TEST_F(PrefetchTest, DirtyMemoryStopsTheBatchAndCoolsDown) {
  Config c = config();
  c.offload_policy = OffloadPolicy::kOnEvict;
  c.lease_max_fraction = 0.9;  // room, not the lease cap, is what runs out
  c.dirty_max_fraction = 1.0;  // no background writeback: dirty stays dirty
  auto store = open(c);
  fill_to_flash(*store, 20);
  // Memory is now full of dirty objects (never written to flash): a
  // prefetch may not evict them, so beyond the free margin that offloads
  // running ahead of writers leave (about budget/16) it finds no room.
  for (int i = 200; i < 260; ++i) ASSERT_TRUE(store->put(key_for(i), value_for(i, 100 << 10)));
  ASSERT_TRUE(eventually([&] { return store->stats().memory.offloads_inflight == 0; }));
  // Landed offloads left free room behind: fill it with dirty data up to
  // where writes start offloads ahead (budget - budget/16).
  memory::MemoryTier& m = StoreTiers::memory(*store);
  for (int i = 300; m.used_bytes() + (200 << 10) < m.budget_bytes() - m.budget_bytes() / 16; ++i)
    ASSERT_TRUE(store->put(key_for(i), value_for(i, 100 << 10)));
  ASSERT_LT(StoreTiers::memory(*store).budget_bytes() - StoreTiers::memory(*store).used_bytes(),
            static_cast<int64_t>(20 * kValue))
      << "the free margin alone would hold every prefetch";
  std::vector<std::string> names;
  for (int i = 0; i < 20; ++i) names.push_back(key_for(i));
  std::vector<std::string_view> keys(names.begin(), names.end());
  const uint64_t offloads = store->stats().memory.offloads;
  store->exist(keys, ExistOptions{.prefetch_to_memory = true});
  ASSERT_TRUE(
      eventually([&] { return counter(*store, "tierkv_prefetch_failed_saturated_total") > 0; }));
  EXPECT_TRUE(eventually([&] {
    return counter(*store, "tierkv_prefetch_promoted_total") +
               counter(*store, "tierkv_prefetch_failed_saturated_total") +
               counter(*store, "tierkv_prefetch_dropped_total") ==
           counter(*store, "tierkv_prefetch_queued_total");
  }));
  // The cooldown runs: the next probe stops at its first flash-only key.
  const uint64_t queued = counter(*store, "tierkv_prefetch_queued_total");
  store->exist(keys, ExistOptions{.prefetch_to_memory = true});
  EXPECT_EQ(counter(*store, "tierkv_prefetch_queued_total"), queued);
  EXPECT_GE(counter(*store, "tierkv_prefetch_early_exits_total"), 1u);
  store->metrics().collect();
  EXPECT_GE(store->metrics().gauge("tierkv_prefetch_cooldowns", "").value(), 1);
  EXPECT_GT(store->metrics().gauge("tierkv_prefetch_cooldown_remaining_ms", "").value(), 0);
  // Strictly clean: no byte a prefetch took (chunks or index room) came
  // from writing dirty data back.
  EXPECT_EQ(store->stats().memory.offloads, offloads) << "a prefetch started an offload";
  // Dirty data was never evicted for a prefetch: every value is intact.
  for (int i = 200; i < 260; ++i) {
    auto v = store->get(key_for(i));
    ASSERT_TRUE(v) << key_for(i);
    EXPECT_EQ(v->to_string(), value_for(i, 100 << 10));
  }
}

TEST_F(PrefetchTest, DemandKickPromotesAFlashReadOnlyWhenEnabled) {
  Config c = config();
  auto store = open(c);
  fill_to_flash(*store, 2);
  free_memory(*store, 2);
  // Kick off and promotion-on-hit off: reads stay on flash.
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(store->get(key_for(0)));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(store->needs_flash(key_for(0)));
  EXPECT_EQ(counter(*store, "tierkv_demand_kicks_total"), 0u);
  c.demand_kick = true;
  ASSERT_TRUE(store->apply_config(ConfigApply::kPrefetch, c).is_ok());
  auto v = store->get(key_for(1));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->to_string(), value_for(1, kValue));
  EXPECT_EQ(counter(*store, "tierkv_demand_kicks_total"), 1u);
  ASSERT_TRUE(eventually([&] { return !store->needs_flash(key_for(1)); }));
  EXPECT_EQ(counter(*store, "tierkv_demand_kicks_promoted_total"), 1u);
  EXPECT_EQ(counter(*store, "tierkv_demand_kicks_failed_total"), 0u);
}

TEST_F(PrefetchTest, PromotionOnHitCanBeTurnedOnAtRunTime) {
  Config c = config();
  auto store = open(c);
  fill_to_flash(*store, 1);
  free_memory(*store, 1);
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(store->get(key_for(0)));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(store->needs_flash(key_for(0))) << "promotion-on-hit is off";
  c.promotion_on_hit = true;
  ASSERT_TRUE(store->apply_config(ConfigApply::kPromotion, c).is_ok());
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(store->get(key_for(0)));
  EXPECT_TRUE(eventually([&] { return !store->needs_flash(key_for(0)); }));
}

TEST_F(PrefetchTest, ProbedKeyDeletedBeforeItsJobNeverComesBack) {
  Config c = config();
  c.lease_max_fraction = 0.9;  // every prefetch may be leased
  auto store = open(c);
  fill_to_flash(*store, 20);
  free_memory(*store, 20);
  std::vector<std::string> names;
  for (int i = 0; i < 20; ++i) names.push_back(key_for(i));
  std::vector<std::string_view> keys(names.begin(), names.end());
  store->exist(keys, ExistOptions{.prefetch_to_memory = true});
  for (int i = 0; i < 20; i += 2) store->remove(key_for(i));
  ASSERT_TRUE(eventually([&] {
    return counter(*store, "tierkv_prefetch_promoted_total") +
               counter(*store, "tierkv_prefetch_failed_gone_total") +
               counter(*store, "tierkv_prefetch_failed_busy_total") +
               counter(*store, "tierkv_prefetch_in_memory_total") ==
           20;
  }));
  for (int i = 0; i < 20; ++i) {
    auto v = store->get(key_for(i));
    if (i % 2 == 0) {
      EXPECT_FALSE(v) << key_for(i) << " deleted, then promoted back";
    } else {
      ASSERT_TRUE(v) << key_for(i);
      EXPECT_EQ(v->to_string(), value_for(i, kValue));
    }
  }
}

// A prefetch whose flash read fails counts as failed_io, installs nothing,
// and leaves the data on flash as it was: the next read gets it whole.
// A store whose flash reads go through a ReadGate.
std::unique_ptr<Store> open_gated(const Config& c, ReadGate*& gate,
                                  std::function<void()> before_pool_job = {}) {
  StoreHooks hooks;
  hooks.before_pool_job = std::move(before_pool_job);
  hooks.wrap_flash_engine = [&gate](std::unique_ptr<flash::IoEngine> inner) {
    auto g = std::make_unique<ReadGate>(std::move(inner));
    gate = g.get();
    return std::unique_ptr<flash::IoEngine>(std::move(g));
  };
  auto opened = Store::open(c, nullptr, OpenMode::kWait, std::move(hooks));
  EXPECT_TRUE(opened) << opened.status().to_string();
  return opened ? std::move(*opened) : nullptr;
}

// promotion-max-inflight-bytes: with every promotion read held, only as
// many objects start as fit the cap; the rest are refused as busy, and once
// the reads go on the bytes in flight fall back to 0.
TEST_F(PrefetchTest, PromotionBytesInFlightStayUnderTheCap) {
  Config c = config();
  c.promotion_max_inflight_bytes = 1 << 20;  // 4 objects of kValue
  c.lease_max_fraction = 1;                  // the lease cap is not what stops them
  ReadGate* gate = nullptr;
  auto store = open_gated(c, gate);
  ASSERT_TRUE(store && gate);
  fill_to_flash(*store, 8);
  free_memory(*store, 8);
  gate->arm();
  std::vector<std::string> names;
  for (int i = 0; i < 8; ++i) names.push_back(key_for(i));
  std::vector<std::string_view> keys(names.begin(), names.end());
  store->exist(keys, ExistOptions{.prefetch_to_memory = true});
  auto in_flight = [&] {
    store->metrics().collect();
    return store->metrics().gauge("tierkv_promotions_inflight_bytes", "").value();
  };
  ASSERT_TRUE(eventually([&] {
    return counter(*store, "tierkv_prefetch_failed_busy_total") == 4 && in_flight() == 1 << 20;
  })) << "busy "
      << counter(*store, "tierkv_prefetch_failed_busy_total") << ", in flight " << in_flight();
  gate->release_held();
  ASSERT_TRUE(eventually([&] { return counter(*store, "tierkv_prefetch_promoted_total") == 4; }));
  EXPECT_TRUE(eventually([&] { return in_flight() == 0; }));
}

// A store whose flash reads go through a ReadGate, with obj:0 and obj:1 on
// flash only and obj:0's prefetch read held at the armed gate.
class GatedPrefetchTest : public PrefetchTest {
 protected:
  void SetUp() override {
    Config c = config();
    store_ = open_gated(c, gate_);
    ASSERT_TRUE(store_ && gate_);
    fill_to_flash(*store_, 2);
    free_memory(*store_, 2);
    gate_->arm();
    EXPECT_EQ(store_->exist(keys_, ExistOptions{.prefetch_to_memory = true}),
              std::vector<bool>{true});
    ASSERT_TRUE(eventually([&] { return gate_->held() > 0; })) << "the prefetch read never started";
  }
  ReadGate* gate_ = nullptr;
  std::unique_ptr<Store> store_;
  std::vector<std::string_view> keys_ = {"obj:0"};
};

TEST_F(GatedPrefetchTest, AFailedPrefetchReadIsCountedAndLeavesTheFlashCopy) {
  Store& store = *store_;
  ReadGate* gate = gate_;
  gate->fail_held();
  ASSERT_TRUE(eventually([&] { return counter(store, "tierkv_prefetch_failed_io_total") == 1; }));
  EXPECT_EQ(counter(store, "tierkv_prefetch_promoted_total"), 0u);
  EXPECT_FALSE(StoreTiers::memory(store).contains(key_for(0)));
  EXPECT_TRUE(store.needs_flash(key_for(0)));
  auto v = store.get(key_for(0));
  ASSERT_TRUE(v) << v.status().to_string();
  EXPECT_EQ(v->to_string(), value_for(0, kValue));
}

// What a read that attached to a promotion received.
struct Received {
  std::mutex mu;
  std::string bytes;
  std::vector<std::shared_ptr<const void>> held;  // pieces kept, as a slow client would
  int done = 0;
  Status status;
  FlashReadCallbacks callbacks() {
    return FlashReadCallbacks{[this](ValuePiece p) {
                                std::lock_guard lock(mu);
                                bytes.append(p.bytes);
                                held.push_back(std::move(p.owner));
                              },
                              [this](Status st) {
                                std::lock_guard lock(mu);
                                ++done;
                                status = st;
                              }};
  }
  size_t size() {
    std::lock_guard lock(mu);
    return bytes.size();
  }
};

// One read, two consumers: a GET and a GETRANGE that come while the key's
// prefetch reads it are served from that read (no device read of their
// own), in order and byte-exact, as its chunks land; a fetch waits for the
// install. The prefetch then needs no lease: the GET was its first read.
TEST_F(GatedPrefetchTest, ReadsDuringThePrefetchTakeItsChunksInsteadOfReadingFlashAgain) {
  Store& store = *store_;
  const size_t device_reads = gate_->reads();
  const std::string value = value_for(0, kValue);
  Received whole, range;
  ReadStart r = store.read(key_for(0), 0, UINT64_MAX, whole.callbacks());
  ASSERT_EQ(r.where, ReadStart::Where::kFlash);
  ASSERT_TRUE(r.flash_read);
  EXPECT_EQ(r.length, kValue);
  const uint64_t from = 64 * 1024 - 10, length = 2 * 64 * 1024;
  ReadStart rr = store.read(key_for(0), from, length, range.callbacks());
  ASSERT_EQ(rr.where, ReadStart::Where::kFlash);
  std::atomic<bool> fetched{false};
  store.fetch(keys_, [&](Status st) {
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    fetched = true;
  });
  EXPECT_EQ(whole.size(), 0u) << "nothing is read yet";
  EXPECT_EQ(gate_->reads(), device_reads) << "a second read of the key went to flash";
  EXPECT_EQ(counter(store, "tierkv_prefetch_reads_attached_total"), 2u);

  gate_->release_held();
  ASSERT_TRUE(eventually([&] { return whole.done == 1 && range.done == 1 && fetched.load(); }));
  EXPECT_TRUE(whole.status.is_ok()) << whole.status.to_string();
  EXPECT_EQ(whole.bytes, value);
  EXPECT_EQ(range.bytes, value.substr(from, length));
  EXPECT_EQ(gate_->reads(), device_reads) << "one device read per chunk";
  ASSERT_TRUE(eventually([&] { return counter(store, "tierkv_prefetch_promoted_total") == 1; }));
  EXPECT_EQ(store.stats().memory.prefetch_reads, 1u) << "the attached GET was its first read";
  auto res = store.residency(key_for(0));
  ASSERT_TRUE(res && res->in_memory);
  for (const ChunkResidency& c : res->chunks) EXPECT_FALSE(c.leased);
  ReadStart again = store.read(key_for(0), 0, UINT64_MAX, whole.callbacks());
  ASSERT_EQ(again.where, ReadStart::Where::kMemory);
  EXPECT_EQ(again.view.to_string(), value);
  // Nothing in flight for obj:1: its read goes to flash.
  const size_t before = gate_->reads();
  Received other;
  ReadStart o = store.read(key_for(1), 0, UINT64_MAX, other.callbacks());
  EXPECT_EQ(o.where, ReadStart::Where::kFlash);
  ASSERT_TRUE(eventually([&] { return other.done == 1; }));
  EXPECT_EQ(other.bytes, value_for(1, kValue));
  EXPECT_GT(gate_->reads(), before);
  EXPECT_EQ(counter(store, "tierkv_prefetch_reads_attached_total"), 2u);
}

// A read that attaches once some chunks have landed gets those at once,
// then the rest as they arrive; a cancelled follower ends alone and the
// promotion goes on.
TEST_F(GatedPrefetchTest, ALateReadGetsTheLandedChunksAtOnceAndCancelEndsOnlyIt) {
  Store& store = *store_;
  const std::string value = value_for(0, kValue);
  gate_->release_first(2);  // chunks 0 and 1 (issued in order)
  ASSERT_TRUE(eventually([&] {
    return store.metrics().counter("tierkv_promotion_bytes_adopted_total", "").value() >=
           2 * 64 * 1024;
  }));
  Received late, quitter;
  ReadStart r = store.read(key_for(0), 0, UINT64_MAX, late.callbacks());
  ASSERT_EQ(r.where, ReadStart::Where::kFlash);
  // With the other reads still held, only the landed chunks can come.
  ASSERT_TRUE(eventually([&] { return late.size() == 2u * 64 * 1024; }));
  {
    std::lock_guard lock(late.mu);
    EXPECT_EQ(late.bytes, value.substr(0, 2 * 64 * 1024));
  }
  ReadStart q = store.read(key_for(0), 0, UINT64_MAX, quitter.callbacks());
  ASSERT_TRUE(q.flash_read);
  q.flash_read->cancel();
  EXPECT_EQ(quitter.done, 1);
  EXPECT_EQ(quitter.status.code(), StatusCode::kUnavailable);
  gate_->release_held();
  ASSERT_TRUE(eventually([&] { return late.done == 1; }));
  EXPECT_EQ(late.bytes, value);
  EXPECT_EQ(quitter.done, 1) << "on_done comes once";
  ASSERT_TRUE(eventually([&] { return counter(store, "tierkv_prefetch_promoted_total") == 1; }));
}

// The window-aware skip: while every read comes right behind its probe (it
// attaches to a promotion that has done nothing yet), the learnt share of
// the promotion that reads find done falls and prefetches are skipped,
// queueing nothing; the promotion time and the share are exported.
TEST_F(PrefetchTest, PrefetchesWhoseReadsComeRightBehindTheirProbesAreSkipped) {
  ReadGate* gate = nullptr;
  auto store = open_gated(config(), gate);
  ASSERT_TRUE(store && gate);
  constexpr int kKeys = 24;
  fill_to_flash(*store, kKeys);
  free_memory(*store, kKeys);
  const auto skipped = [&] { return counter(*store, "tierkv_prefetch_skipped_no_window_total"); };
  auto probe = [&](int i) {
    const std::string key = key_for(i);
    const std::vector<std::string_view> keys = {key};
    store->exist(keys, ExistOptions{.prefetch_to_memory = true});
  };
  int i = 0;
  for (; i < kKeys; ++i) {
    gate->arm();
    probe(i);
    if (skipped() > 0) break;
    ASSERT_TRUE(eventually([&] { return gate->held() > 0; })) << "prefetch " << i;
    Received read;
    ReadStart r = store->read(key_for(i), 0, UINT64_MAX, read.callbacks());
    ASSERT_EQ(r.where, ReadStart::Where::kFlash);
    // The promotion takes far longer than the read's gap behind its probe.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    gate->release_held();
    ASSERT_TRUE(eventually([&] { return read.done == 1; }));
    EXPECT_EQ(read.bytes, value_for(i, kValue));
    ASSERT_TRUE(eventually([&] {
      return counter(*store, "tierkv_prefetch_promoted_total") == static_cast<uint64_t>(i + 1);
    }));
  }
  ASSERT_GT(skipped(), 0u) << "no prefetch skipped after " << i << " early reads";
  EXPECT_LE(i, 2 * PrefetchWindow::kMinSamples);
  gate->release_held();
  // Skipped probes queue nothing (fewer than one explorer's worth).
  const uint64_t queued = counter(*store, "tierkv_prefetch_queued_total");
  for (int k = 0; k < PrefetchWindow::kExploreEvery - 2 && ++i < kKeys; ++k) probe(i);
  EXPECT_EQ(counter(*store, "tierkv_prefetch_queued_total"), queued);
  store->metrics().collect();
  EXPECT_LT(store->metrics().gauge("tierkv_prefetch_window_share", "").value(), 200);
  EXPECT_GE(store->metrics().gauge("tierkv_prefetch_promotion_us", "").value(), 50000);
}

// Takeover: a read of a key whose prefetch is still queued (no worker free)
// starts that job itself and is served by its read, one device read per
// chunk, before any worker is free; the install then runs on the pool.
TEST_F(PrefetchTest, AReadTakesOverAQueuedPrefetchAndReadsEachChunkOnce) {
  Config c = config();
  c.promotion_workers = 1;
  testing::PoolGate workers;
  ReadGate* gate = nullptr;
  auto store = open_gated(c, gate, workers.hook());
  ASSERT_TRUE(store && gate);
  fill_to_flash(*store, 1);
  free_memory(*store, 1);
  workers.set_open(false);
  const std::vector<std::string_view> keys = {"obj:0"};
  store->exist(keys, ExistOptions{.prefetch_to_memory = true});
  ASSERT_EQ(counter(*store, "tierkv_prefetch_queued_total"), 1u);
  const size_t device_reads = gate->reads();
  Received read;
  ReadStart r = store->read(key_for(0), 0, UINT64_MAX, read.callbacks());
  ASSERT_EQ(r.where, ReadStart::Where::kFlash);
  ASSERT_TRUE(eventually([&] { return read.done == 1; })) << "the read waited for a worker";
  EXPECT_TRUE(read.status.is_ok()) << read.status.to_string();
  EXPECT_EQ(read.bytes, value_for(0, kValue));
  EXPECT_EQ(counter(*store, "tierkv_prefetch_reads_attached_total"), 1u);
  EXPECT_EQ(counter(*store, "tierkv_prefetch_promoted_total"), 0u) << "installed with no worker";
  workers.set_open(true);
  ASSERT_TRUE(eventually([&] { return counter(*store, "tierkv_prefetch_promoted_total") == 1; }));
  EXPECT_EQ(gate->reads() - device_reads, kValue / c.chunk_size) << "one device read per chunk";
  EXPECT_TRUE(StoreTiers::memory(*store).contains(key_for(0)));
}

}  // namespace
}  // namespace tierkv
