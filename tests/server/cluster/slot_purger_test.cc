// SlotPurger and a store that is still loading: a slot marked for purging
// stays marked (its commands answer -TRYAGAIN) until the store has loaded
// and the purge has removed the keys flash kept, so that none of them is
// served afterwards. A purge that scanned the loading store would find
// memory empty, finish at once, and leave every key on flash to come back.
#include "server/cluster/slot_purger.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "cluster/key_slot.h"
#include "core/status_wait.h"
#include "tests/store/store_test_util.h"

namespace tierkv::server {
namespace {

using std::chrono::milliseconds;

Config flash_config(const testing::TempDir& dir) {
  Config c;
  c.flash_path = dir.file("flash.dat");
  c.flash_size = int64_t{256} << 20;
  c.memory = int64_t{32} << 20;
  c.flash_fsync = FlashFsync::kAlways;
  return c;
}

cluster::SlotMap map_owning_everything() {
  cluster::SlotMap map;
  map.set_version(3);
  const size_t self = map.upsert_node({"self", "127.0.0.1", 7000});
  // Held since this version: written by a controller (a hand-written map
  // has no "since", and its first map keeps what the node owns).
  for (uint32_t s = 0; s < cluster::kSlotCount; ++s)
    map.set_owner(static_cast<uint16_t>(s), self, /*since=*/3);
  return map;
}

TEST(SlotPurgerTest, APurgeWaitsForTheStoreToLoad) {
  testing::TempDir dir;
  const Config config = flash_config(dir);
  constexpr int kKeys = 200;
  {
    auto store = Store::open(config);
    ASSERT_TRUE(store.is_ok()) << store.status().to_string();
    StatusWait on_flash;
    for (int i = 0; i < kKeys; ++i) {
      const std::string key = "k" + std::to_string(i);
      Result<WriteResult> w = (*store)->put(key, testing::value_for(i, 3000));
      ASSERT_TRUE(w.is_ok());
      (*store)->persist(key, w->version, on_flash.arrival());
    }
    ASSERT_TRUE(on_flash.wait().is_ok());
  }
  testing::PoolGate load_gate;
  load_gate.set_open(false);
  StoreHooks hooks;
  hooks.before_load = load_gate.hook();
  auto store = Store::open(config, nullptr, OpenMode::kBackground, std::move(hooks));
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  ASSERT_TRUE((*store)->loading());

  // No state file: every slot of the first map is purged.
  SlotPurger purger(**store, {.cluster_name = "c", .self_id = "self", .state_path = ""});
  purger.mark(nullptr, map_owning_everything());
  const uint16_t slot = cluster::key_slot("k0");
  ASSERT_TRUE(purger.purging(slot));
  std::this_thread::sleep_for(milliseconds(300));  // time for a purge that would not wait
  EXPECT_TRUE(purger.purging(slot)) << "the purge finished while the store was loading";

  load_gate.set_open(true);
  (*store)->wait_loaded();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (purger.purging(slot) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(10));
  ASSERT_FALSE(purger.purging(slot));
  EXPECT_EQ(purger.keys_purged(), static_cast<uint64_t>(kKeys));
  for (int i = 0; i < kKeys; ++i)
    EXPECT_FALSE((*store)->exists("k" + std::to_string(i))) << "k" << i << " came back";
}

void wait_purged(const SlotPurger& purger, uint16_t slot) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (purger.purging(slot) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(10));
  ASSERT_FALSE(purger.purging(slot)) << "slot " << slot << " stayed marked";
}

// A map that takes a slot away (the node was cut off while it was given
// to another) leaves keys no one routes to: they go. A slot this node is
// moving away still belongs to it, and its keys stay for the move.
TEST(SlotPurgerTest, ASlotTakenAwayLosesItsKeysAndAMovingOneKeepsThem) {
  Config config;
  config.memory = int64_t{32} << 20;
  auto store = Store::open(config);
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  SlotPurger purger(**store, {.cluster_name = "c", .self_id = "self", .state_path = ""});
  cluster::SlotMap before = map_owning_everything();
  purger.mark(nullptr, before);
  wait_purged(purger, 0);

  // Keys in three slots: one stays, one is moving away, one is taken away.
  const std::string kept = "{a}k", moving = "{b}k", taken = "{c}k";
  for (const std::string& key : {kept, moving, taken})
    ASSERT_TRUE((*store)->put(key, testing::value_for(1, 100)).is_ok());
  cluster::SlotMap after = before;
  after.set_version(4);
  const size_t other = after.upsert_node({"other", "127.0.0.1", 7001});
  after.set_moving(cluster::key_slot(moving), other, /*since=*/4);
  after.set_owner(cluster::key_slot(taken), other, /*since=*/4);
  purger.mark(&before, after);
  EXPECT_FALSE(purger.purging(cluster::key_slot(kept)));
  EXPECT_FALSE(purger.purging(cluster::key_slot(moving)));
  wait_purged(purger, cluster::key_slot(taken));
  EXPECT_EQ(purger.keys_purged(), 1u);
  EXPECT_TRUE((*store)->exists(kept));
  EXPECT_TRUE((*store)->exists(moving));
  EXPECT_FALSE((*store)->exists(taken));

  // The move finishes: the flip marks nothing (the migrator moved the keys).
  cluster::SlotMap flipped = after;
  flipped.set_version(5);
  flipped.set_owner(cluster::key_slot(moving), other, /*since=*/4);
  purger.mark(&after, flipped);
  EXPECT_FALSE(purger.purging(cluster::key_slot(moving)));
  after = flipped;

  // Given back later, the slot starts empty again: a key written here
  // while it was away (a command routed by the old map) goes.
  ASSERT_TRUE((*store)->put(taken, testing::value_for(2, 100)).is_ok());
  cluster::SlotMap back = after;
  back.set_version(6);
  back.set_owner(cluster::key_slot(taken), 0, /*since=*/6);
  purger.mark(&after, back);
  wait_purged(purger, cluster::key_slot(taken));
  EXPECT_FALSE((*store)->exists(taken));
  EXPECT_EQ(purger.keys_purged(), 2u);
}

}  // namespace
}  // namespace tierkv::server
