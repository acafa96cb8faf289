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

}  // namespace
}  // namespace tierkv::server
