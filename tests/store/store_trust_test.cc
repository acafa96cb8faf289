// The Store's part of the trust contract: deleted, expired and overwritten
// data never comes back, across the tiers and across restarts. Each test is
// one finding of the trust issue and failed before its fix.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <map>
#include <random>
#include <thread>

#include "core/clock.h"
#include "flash/flash_tier.h"
#include "store/store.h"
#include "store_test_util.h"

namespace tierkv {
namespace {

using testing::TempDir;
using testing::value_for;

class StoreTrustTest : public ::testing::Test {
 protected:
  Config config(OffloadPolicy offload = OffloadPolicy::kOnEvict) const {
    Config c;
    c.memory = 8 << 20;
    c.chunk_size = 64 << 10;
    c.memory_shards = 4;
    c.active_expire_hz = 0;
    c.flash_path = dir_.file("flash.dat");
    c.flash_size = 128 << 20;
    c.region_size = 1 << 20;
    c.flash_preallocate = false;
    c.offload_policy = offload;
    return c;
  }
  std::unique_ptr<Store> open(const Config& c) {
    auto s = Store::open(c);
    EXPECT_TRUE(s) << s.status().to_string();
    return s ? std::move(*s) : nullptr;
  }
  // Pushes everything written so far out of the 8 MiB memory.
  void push_out(Store& store, int round) {
    for (int i = 0; i < 24; ++i)
      ASSERT_TRUE(store.put("filler:" + std::to_string(round) + ":" + std::to_string(i),
                            value_for(i, 1 << 20)));
    store.flash_tier()->flush();
  }
  // Clean shutdown and restart, as SHUTDOWN does it.
  std::unique_ptr<Store> restart(std::unique_ptr<Store> store, const Config& c) {
    EXPECT_TRUE(store->close_cleanly().is_ok());
    store.reset();
    return open(c);
  }

  TempDir dir_;
};

// Finding 1 and the first report: an overwrite wrote no tombstone
// and a later DEL found nothing to remove, so the old value came back.
TEST_F(StoreTrustTest, OverwriteThenDeleteStaysDeletedAfterRestart) {
  const Config c = config();
  auto store = open(c);
  ASSERT_TRUE(store->put("k", value_for(1, 4 << 20)));
  ASSERT_TRUE(store->put("kept", value_for(2, 4 << 20)));
  push_out(*store, 0);
  ASSERT_EQ(store->residency("k")->state, "flash");
  ASSERT_TRUE(store->put("k", "small"));
  ASSERT_TRUE(store->put("kept", "new"));
  EXPECT_TRUE(store->remove("k"));
  store = restart(std::move(store), c);
  EXPECT_EQ(store->get("k").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->get("kept")->to_string(), "new");
  // Overwritten, pushed out again, restarted: still the newest value.
  push_out(*store, 1);
  store = restart(std::move(store), c);
  EXPECT_EQ(store->get("kept")->to_string(), "new");
  EXPECT_EQ(store->get("k").status().code(), StatusCode::kNotFound);
}

// Finding 2: an expiry change while the key's copy is being written must
// reach the flash copy, which otherwise lands with the old expiry and
// serves the key without a TTL once the memory copy is gone.
TEST_F(StoreTrustTest, ExpiryChangedWhileTheCopyIsWrittenReachesFlash) {
  const Config c = config(OffloadPolicy::kWriteThrough);
  auto store = open(c);
  const int64_t later = unix_time_ms() + 3'600'000;
  for (int i = 0; i < 40; ++i) {
    const std::string key = "t" + std::to_string(i);
    ASSERT_TRUE(store->put(key, value_for(i, 256 << 10)));  // its copy starts now
    ASSERT_TRUE(store->set_expiry(key, later + i));
  }
  push_out(*store, 0);
  for (int i = 0; i < 40; ++i) {
    const std::string key = "t" + std::to_string(i);
    std::optional<ObjectResidency> r = store->residency(key);
    ASSERT_TRUE(r) << key;
    EXPECT_EQ(r->expire_at_ms, later + i) << key << " state " << r->state;
  }
  store = restart(std::move(store), c);
  for (int i = 0; i < 40; ++i) {
    const std::string key = "t" + std::to_string(i);
    std::optional<ObjectInfo> info = store->stat(key);
    ASSERT_TRUE(info) << key;
    EXPECT_EQ(info->expire_at_ms, later + i) << key;
  }
}

// Finding 3: v1's write in flight during SET v2 was indexed when it landed;
// once v2 (which never reached flash) expired, GET served v1.
TEST_F(StoreTrustTest, OlderVersionLandingLateIsNeverServed) {
  const Config c = config();
  auto store = open(c);
  const int n = 40;
  std::vector<std::future<Status>> landed;
  for (int i = 0; i < n; ++i) {
    const std::string key = "v" + std::to_string(i);
    Result<WriteResult> v1 = store->put(key, value_for(i, 256 << 10));
    ASSERT_TRUE(v1);
    auto done = std::make_shared<std::promise<Status>>();
    landed.push_back(done->get_future());
    store->persist(key, v1->version, [done](Status s) { done->set_value(s); });  // in flight
    WriteOptions short_ttl;
    short_ttl.expire_at_ms = unix_time_ms() + 150;
    ASSERT_TRUE(store->put(key, "v2", short_ttl));  // stays in memory, dirty
  }
  for (auto& f : landed) EXPECT_TRUE(f.get().is_ok());
  const int64_t deadline = unix_time_ms() + 5000;
  while (unix_time_ms() < deadline) {
    bool any = false;
    for (int i = 0; i < n; ++i) any = any || store->get("v" + std::to_string(i)).is_ok();
    if (!any) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int i = 0; i < n; ++i) {
    Result<ObjectView> v = store->get("v" + std::to_string(i));
    EXPECT_FALSE(v.is_ok()) << "v" << i << " came back: " << v->to_string().size() << " bytes";
  }
  EXPECT_EQ(store->size(), 0u);
  store = restart(std::move(store), c);
  for (int i = 0; i < n; ++i) EXPECT_FALSE(store->get("v" + std::to_string(i)).is_ok()) << i;
}

// An object that expires in memory while its flash copy carries no expiry
// (written before an EXPIRE reached it) must not come back from flash.
TEST_F(StoreTrustTest, ExpiredInMemoryNeverServedFromFlash) {
  const Config c = config(OffloadPolicy::kWriteThrough);
  auto store = open(c);
  for (int i = 0; i < 40; ++i) {
    const std::string key = "e" + std::to_string(i);
    ASSERT_TRUE(store->put(key, value_for(i, 128 << 10)));
    ASSERT_TRUE(store->set_expiry(key, unix_time_ms() + 100));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  for (int i = 0; i < 40; ++i) EXPECT_FALSE(store->get("e" + std::to_string(i)).is_ok()) << i;
  push_out(*store, 0);
  for (int i = 0; i < 40; ++i) EXPECT_FALSE(store->get("e" + std::to_string(i)).is_ok()) << i;
  store = restart(std::move(store), c);
  for (int i = 0; i < 40; ++i) EXPECT_FALSE(store->get("e" + std::to_string(i)).is_ok()) << i;
}

// Finding 6: DEL's tombstone covered the global newest version, so a SET of
// the key published while the DEL ran vanished at restart. Writers and a
// remover race on the same keys; whatever memory holds at the end must be
// exactly what a restart finds.
TEST_F(StoreTrustTest, ConcurrentSetSurvivesADeleteItRacedWith) {
  const Config c = config();
  auto store = open(c);
  const int keys = 16, rounds = 2000;
  std::atomic<bool> stop{false};
  std::thread remover([&] {
    std::mt19937 rng(7);
    while (!stop.load()) store->remove("r" + std::to_string(rng() % keys));
  });
  for (int round = 0; round < rounds; ++round) {
    for (int k = 0; k < keys; ++k) {
      ASSERT_TRUE(store->put("r" + std::to_string(k), std::to_string(round)));
    }
  }
  stop = true;
  remover.join();
  std::map<std::string, std::string> expected;
  for (int k = 0; k < keys; ++k) {
    Result<ObjectView> v = store->get("r" + std::to_string(k));
    if (v) expected["r" + std::to_string(k)] = v->to_string();
  }
  store = restart(std::move(store), c);
  for (int k = 0; k < keys; ++k) {
    const std::string key = "r" + std::to_string(k);
    Result<ObjectView> v = store->get(key);
    auto want = expected.find(key);
    if (want == expected.end()) {
      EXPECT_FALSE(v.is_ok()) << key;
    } else {
      ASSERT_TRUE(v.is_ok()) << key << " lost at restart";
      EXPECT_EQ(v->to_string(), want->second) << key;
    }
  }
}

// fsync=always: a removal or expiry change reports durable only after its
// record is on the device; a restart after it finds the key gone.
TEST_F(StoreTrustTest, DurableRemovalAndExpiryReportAfterLanding) {
  Config c = config();
  c.flash_fsync = FlashFsync::kAlways;
  auto store = open(c);
  ASSERT_TRUE(store->put("gone", value_for(1, 1 << 20)));
  ASSERT_TRUE(store->put("ttl", value_for(2, 1 << 20)));
  push_out(*store, 0);
  std::promise<Status> removed, expired;
  EXPECT_TRUE(store->remove("gone", std::nullopt, [&](Status s) { removed.set_value(s); }));
  EXPECT_TRUE(
      store->set_expiry("ttl", unix_time_ms() + 60'000, [&](Status s) { expired.set_value(s); }));
  EXPECT_TRUE(removed.get_future().get().is_ok());
  EXPECT_TRUE(expired.get_future().get().is_ok());
  // No clean shutdown: what was reported durable is on the device.
  store.reset();
  store = open(c);
  EXPECT_FALSE(store->get("gone").is_ok());
  ASSERT_TRUE(store->stat("ttl"));
  EXPECT_GT(store->stat("ttl")->expire_at_ms, 0);
}

}  // namespace
}  // namespace tierkv
