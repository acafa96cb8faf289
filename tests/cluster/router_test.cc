// Router's answers, case by case, as Redis Cluster 7 gives them; the
// integration tests compare the same cases with a redis-server cluster.
#include "cluster/router.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace tierkv::cluster {
namespace {

class RouterTest : public ::testing::Test {
 protected:
  RouterTest() {
    map.upsert_node({"me", "127.0.0.1", 7001, 1});
    map.upsert_node({"other", "127.0.0.1", 7002, 1});
    for (uint32_t s = 0; s < kSlotCount; ++s)
      map.set_owner(static_cast<uint16_t>(s), s < 8192 ? 0 : 1);
  }
  Route ask(std::vector<std::string_view> keys, bool asking = false, bool up = true) {
    RouteQuery q;
    q.keys = keys;
    q.asking = asking;
    q.cluster_up = up;
    q.exists = [this](std::string_view k) { return here.count(std::string(k)) > 0; };
    return route(map, 0, q);
  }
  SlotMap map;
  std::set<std::string> here;
};

// "bar" is slot 5061 (ours), "foo" 12182 (the other node's).
TEST_F(RouterTest, OwnSlotsAreServedAndOthersMoved) {
  EXPECT_TRUE(ask({"bar"}).serve());
  const Route moved = ask({"foo"});
  EXPECT_EQ(moved.kind, Route::Kind::kMoved);
  EXPECT_EQ(moved.error(), "MOVED 12182 127.0.0.1:7002");
  EXPECT_TRUE(ask({}).serve());
}

TEST_F(RouterTest, KeysInTwoSlotsAreCrossSlotEvenWhenDown) {
  EXPECT_EQ(ask({"bar", "foo"}).error(), "CROSSSLOT Keys in request don't hash to the same slot");
  EXPECT_EQ(ask({"bar", "foo"}, false, false).kind, Route::Kind::kCrossSlot);
  EXPECT_TRUE(ask({"{bar}.a", "{bar}.b", "bar"}).serve());
}

TEST_F(RouterTest, DownAndUnservedSlots) {
  EXPECT_EQ(ask({"bar"}, false, /*up=*/false).error(), "CLUSTERDOWN The cluster is down");
  map.set_owner(5061, SlotMap::kNoNode);
  EXPECT_EQ(ask({"bar"}).error(), "CLUSTERDOWN Hash slot not served");
}

// A node the map does not name yet (it just joined) serves nothing, and
// sends every key to its owner; with ASKING (the owner's newer map already
// moves the slot here) it answers -TRYAGAIN until its own map names it.
TEST_F(RouterTest, ANodeNotInTheMapRedirects) {
  RouteQuery q;
  std::vector<std::string_view> keys{"bar"};
  q.keys = keys;
  EXPECT_EQ(route(map, SlotMap::kNoNode, q).error(), "MOVED 5061 127.0.0.1:7001");
  map.set_moving(5061, 1);
  EXPECT_EQ(route(map, SlotMap::kNoNode, q).kind, Route::Kind::kMoved);
  q.asking = true;
  EXPECT_EQ(route(map, SlotMap::kNoNode, q).error(),
            "TRYAGAIN The slot is not being imported here yet");
  map.set_owner(5061, SlotMap::kNoNode);
  EXPECT_EQ(route(map, SlotMap::kNoNode, q).kind, Route::Kind::kUnserved);
}

TEST_F(RouterTest, MovingAwayAsksForMissingKeys) {
  map.set_moving(5061, 1);
  here = {"bar"};
  EXPECT_TRUE(ask({"bar"}).serve());  // still here
  const Route missing = ask({"{bar}x"});
  EXPECT_EQ(missing.error(), "ASK 5061 127.0.0.1:7002");
  EXPECT_EQ(ask({"bar", "{bar}x"}).error(),
            "TRYAGAIN Multiple keys request during rehashing of slot");
  EXPECT_EQ(ask({"{bar}y", "{bar}x"}).kind, Route::Kind::kAsk);  // all gone: ask
}

// ASKING for a slot this node's map does not move here: the client followed
// an -ASK from a node whose map is newer than this one's. -MOVED would send
// it straight back there; -TRYAGAIN makes it wait and start again. A write
// made outside any command (ask_retries off) gets the usual -MOVED.
TEST_F(RouterTest, AskingForASlotNotMovingHereIsTryAgain) {
  EXPECT_EQ(ask({"foo"}, /*asking=*/true).error(),
            "TRYAGAIN The slot is not being imported here yet");
  map.set_moving(12182, 1);  // moving, but to another node (here: its owner)
  EXPECT_EQ(ask({"foo"}, true).kind, Route::Kind::kTryAgain);
  RouteQuery q;
  std::vector<std::string_view> keys{"foo"};
  q.keys = keys;
  q.asking = true;
  q.ask_retries = false;
  EXPECT_EQ(route(map, 0, q).error(), "MOVED 12182 127.0.0.1:7002");
  EXPECT_TRUE(ask({"bar"}, true).serve());  // its own slot: ASKING changes nothing
}

TEST_F(RouterTest, MovingHereServesOnlyAfterAsking) {
  map.set_moving(12182, 0);  // "foo": the other node's, coming here
  EXPECT_EQ(ask({"foo"}).kind, Route::Kind::kMoved);
  EXPECT_TRUE(ask({"foo"}, /*asking=*/true).serve());  // missing, single key: served
  EXPECT_EQ(ask({"foo", "{foo}2"}, true).kind, Route::Kind::kTryAgain);
  here = {"foo", "{foo}2"};
  EXPECT_TRUE(ask({"foo", "{foo}2"}, true).serve());
}

// A slot this node just handed to its owner is -ASK there: that owner may
// still have the map that names this node, and would -MOVED the client
// back. Any other owner, or no handoff, is -MOVED.
TEST_F(RouterTest, ASlotJustHandedToItsOwnerIsAsked) {
  std::vector<std::string_view> keys{"foo"};
  RouteQuery q;
  q.keys = keys;
  std::vector<uint16_t> asked;
  q.handed_to = [&asked](uint16_t slot, const ClusterNode& owner) {
    asked.push_back(slot);
    return owner.id == "other";
  };
  EXPECT_EQ(route(map, 0, q).error(), "ASK 12182 127.0.0.1:7002");
  EXPECT_EQ(asked, std::vector<uint16_t>{12182});
  q.handed_to = [](uint16_t, const ClusterNode&) { return false; };
  EXPECT_EQ(route(map, 0, q).kind, Route::Kind::kMoved);
  q.handed_to = [](uint16_t, const ClusterNode&) { return true; };
  EXPECT_EQ(route(map, SlotMap::kNoNode, q).kind, Route::Kind::kMoved);  // not in the map
  keys = {"bar"};
  EXPECT_TRUE(route(map, 0, q).serve());  // its own slot
}

TEST(CommonSlotTest, OneSlotOrNone) {
  const std::vector<std::string_view> same = {"{a}1", "{a}2"};
  const std::vector<std::string_view> split = {"bar", "foo"};
  EXPECT_EQ(common_slot(same), key_slot("a"));
  EXPECT_EQ(common_slot(split), std::nullopt);
  EXPECT_EQ(common_slot({}), std::nullopt);
}

}  // namespace
}  // namespace tierkv::cluster
