// Controller: next_map() gives live nodes every slot by weight and drops
// dead ones, changing nothing when nothing changed; against a real etcd,
// one of two controllers leads, writes the map the registered nodes need,
// follows a node's death, and hands over when the leader goes.
#include "cluster/controller.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <thread>

#include "cluster/etcd_client.h"
#include "cluster/member.h"
#include "tests/cluster/etcd_fixture.h"

namespace tierkv::cluster {
namespace {

using std::chrono::milliseconds;
using testing::eventually;

ClusterNode node(const std::string& id, uint64_t weight = 1) {
  return {id, "127.0.0.1", 7000, weight};
}

// Every slot moving in `map` reported moved by its owner, for map's version.
std::map<std::string, MoveReport> all_moved(const SlotMap& map) {
  std::map<std::string, MoveReport> reports;
  for (uint32_t s = 0; s < kSlotCount; ++s) {
    const auto slot = static_cast<uint16_t>(s);
    if (map.moving_to(slot) == SlotMap::kNoNode) continue;
    MoveReport& r = reports[map.nodes()[map.owner(slot)].id];
    r.version = map.version();
    r.add(slot, map.nodes()[map.moving_to(slot)].id);
  }
  return reports;
}

size_t moving_to(const SlotMap& map, std::string_view id) {
  size_t n = 0;
  for (uint32_t s = 0; s < kSlotCount; ++s)
    n += map.moving_to(static_cast<uint16_t>(s)) == *map.index_of(id) ? 1 : 0;
  return n;
}

TEST(NextMapTest, JoinsMoveThenFlipLeavesDoNot) {
  const SlotMap first = next_map(nullptr, {node("a"), node("b")});
  EXPECT_EQ(first.version(), 1u);
  EXPECT_EQ(first.unowned_slots(), 0u);
  EXPECT_EQ(first.slots_owned_by(0), 8192u);
  EXPECT_EQ(next_map(&first, {node("a"), node("b")}).version(), 1u);  // nothing changed
  // A join: c's share moves to it, still owned by a and b meanwhile.
  const SlotMap joined = next_map(&first, {node("a"), node("b"), node("c", 2)});
  EXPECT_EQ(joined.version(), 2u);
  EXPECT_EQ(joined.slots_owned_by(*joined.index_of("c")), 0u);
  EXPECT_EQ(moving_to(joined, "c"), 8192u);
  EXPECT_EQ(next_map(&joined, {node("a"), node("b"), node("c", 2)}).version(), 2u);
  // A report for another version flips nothing.
  std::map<std::string, MoveReport> stale = all_moved(joined);
  for (auto& [id, r] : stale) r.version = 1;
  EXPECT_EQ(next_map(&joined, {node("a"), node("b"), node("c", 2)}, stale).version(), 2u);
  // Only a's report: a's slots flip, b's keep moving.
  std::map<std::string, MoveReport> from_a = all_moved(joined);
  from_a.erase("b");
  const SlotMap half = next_map(&joined, {node("a"), node("b"), node("c", 2)}, from_a);
  EXPECT_EQ(half.version(), 3u);
  EXPECT_EQ(half.slots_owned_by(*half.index_of("c")), 4096u);
  EXPECT_EQ(moving_to(half, "c"), 4096u);
  const SlotMap flipped = next_map(&half, {node("a"), node("b"), node("c", 2)}, all_moved(half));
  EXPECT_EQ(flipped.slots_owned_by(*flipped.index_of("c")), 8192u);
  EXPECT_EQ(moving_to(flipped, "c"), 0u);
  // A death: b's slots go to the survivors at once (nothing to move from).
  const SlotMap left = next_map(&flipped, {node("a"), node("c", 2)});
  EXPECT_FALSE(left.index_of("b"));
  EXPECT_EQ(left.unowned_slots(), 0u);
  for (uint32_t s = 0; s < kSlotCount; ++s) {
    const auto slot = static_cast<uint16_t>(s);
    EXPECT_EQ(left.moving_to(slot), SlotMap::kNoNode);
    // a kept every slot it had: only b's went.
    if (flipped.owner(slot) == *flipped.index_of("a")) {
      EXPECT_EQ(left.owner(slot), *left.index_of("a"));
    }
  }
  // A drain (weight 0): every slot of a moves to c, then flips.
  const SlotMap draining = next_map(&left, {node("a", 0), node("c", 2)});
  EXPECT_EQ(moving_to(draining, "c"), left.slots_owned_by(*left.index_of("a")));
  const SlotMap drained = next_map(&draining, {node("a", 0), node("c", 2)}, all_moved(draining));
  EXPECT_EQ(drained.slots_owned_by(*drained.index_of("a")), 0u);
  EXPECT_EQ(drained.slots_owned_by(*drained.index_of("c")), kSlotCount);
}

// held_since(): a node tells from one map whether it held a slot without a
// break since a version, whatever maps it missed.
TEST(NextMapTest, EachSlotSaysSinceWhenItsHoldersHeldIt) {
  const SlotMap first = next_map(nullptr, {node("a"), node("b")});
  const size_t a = *first.index_of("a"), b = *first.index_of("b");
  const uint16_t of_b = 16000;  // b's in the even split
  ASSERT_EQ(first.owner(of_b), b);
  EXPECT_EQ(first.held_since(of_b, b), 1u);
  EXPECT_FALSE(first.held_since(of_b, a));
  // b drains: the slot moves to a (since the move began), b keeps its own.
  const SlotMap draining = next_map(&first, {node("a"), node("b", 0)}, {}, 10);
  EXPECT_EQ(draining.version(), 10u);  // min_version
  EXPECT_EQ(draining.held_since(of_b, b), 1u);
  EXPECT_EQ(draining.held_since(of_b, a), 10u);
  const SlotMap again = next_map(&draining, {node("a"), node("b", 0)}, {}, 0);
  EXPECT_EQ(again.version(), 10u);  // nothing changed
  // The flip hands the move's "since" to the new owner.
  const SlotMap drained = next_map(&draining, {node("a"), node("b", 0)}, all_moved(draining));
  EXPECT_EQ(drained.held_since(of_b, a), 10u);
  EXPECT_FALSE(drained.held_since(of_b, b));
  // b comes back: the slot moves to it anew, so b's old keys of it are stale
  // (since 12 > 1) while a's hold is unbroken (10).
  const SlotMap back = next_map(&drained, {node("a"), node("b")}, {}, 12);
  ASSERT_EQ(back.moving_to(of_b), *back.index_of("b"));
  EXPECT_EQ(back.held_since(of_b, *back.index_of("b")), 12u);
  EXPECT_EQ(back.held_since(of_b, *back.index_of("a")), 10u);
  // a dies: its slots go to b at once, held since the new version.
  const SlotMap alone = next_map(&back, {node("b")});
  EXPECT_EQ(alone.held_since(of_b, *alone.index_of("b")), 13u);
  // The JSON keeps every "since".
  Result<SlotMap> parsed = SlotMap::from_json(back.to_json());
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
  for (uint32_t s = 0; s < kSlotCount; ++s) {
    const auto slot = static_cast<uint16_t>(s);
    ASSERT_EQ(parsed->owner_since(slot), back.owner_since(slot)) << s;
    ASSERT_EQ(parsed->moving_since(slot), back.moving_since(slot)) << s;
  }
  // A "since" after the map's own version is no map's.
  std::string bad = back.to_json();
  bad.replace(bad.find("\"version\":12"), 12, "\"version\":11");
  EXPECT_FALSE(SlotMap::from_json(bad).is_ok());
}

TEST(NextMapTest, AMoveToANodeThatDiesStops) {
  const SlotMap first = next_map(nullptr, {node("a")});
  const SlotMap joined = next_map(&first, {node("a"), node("b")});
  EXPECT_EQ(moving_to(joined, "b"), 8192u);
  const SlotMap back = next_map(&joined, {node("a")});
  EXPECT_EQ(back.slots_owned_by(*back.index_of("a")), kSlotCount);
  for (uint32_t s = 0; s < kSlotCount; ++s)
    EXPECT_EQ(back.moving_to(static_cast<uint16_t>(s)), SlotMap::kNoNode);
}

TEST(MoveReportTest, RoundTripsAndRefusesBadRanges) {
  MoveReport r;
  r.version = 9;
  for (uint16_t s = 10; s <= 20; ++s) r.add(s, "b");
  r.add(21, "c");
  r.add(40, "c");
  ASSERT_EQ(r.moved.size(), 3u);
  EXPECT_EQ(r.moved[0], (MovedSlots{10, 20, "b"}));
  Result<MoveReport> back = MoveReport::from_json(r.to_json());
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->version, 9u);
  EXPECT_EQ(back->moved, r.moved);
  EXPECT_TRUE(back->moved_to(15, "b"));
  EXPECT_FALSE(back->moved_to(15, "c"));
  EXPECT_FALSE(back->moved_to(30, "c"));
  for (std::string_view bad :
       {"", "[]", R"({"version":-1,"moved":[]})", R"({"version":1,"moved":[[5,4,"b"]]})",
        R"({"version":1,"moved":[[1,16384,"b"]]})", R"({"version":1,"moved":[[1,2]]})",
        R"({"version":1})"}) {
    EXPECT_FALSE(MoveReport::from_json(bad).is_ok()) << bad;
  }
}

TEST(MoveStallTest, RoundTripsAndRefusesWhatIsNotOne) {
  const MoveStall stall{7, "target-id", "WRONGPASS invalid username-password pair"};
  Result<MoveStall> back = MoveStall::from_json(stall.to_json());
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->version, 7u);
  EXPECT_EQ(back->target, "target-id");
  EXPECT_EQ(back->error, stall.error);
  EXPECT_EQ(stall_key("c", "n1"), "/tierkv/c/stalled/n1");
  for (std::string_view bad : {"", "[]", R"({"version":-1,"target":"t","error":"e"})",
                               R"({"version":1,"target":2,"error":"e"})", R"({"version":1})"}) {
    EXPECT_FALSE(MoveStall::from_json(bad).is_ok()) << bad;
  }
}

class ControllerTest : public ::testing::Test {
 protected:
  ControllerOptions options(std::string id) {
    return {{etcd.endpoint()}, {}, "t", std::move(id), std::chrono::seconds(2), milliseconds(100),
            milliseconds(500)};
  }
  std::optional<SlotMap> stored_map() {
    Result<EtcdRange> r = client.get(slot_map_key("t"));
    if (!r.is_ok() || r->kvs.empty()) return std::nullopt;
    Result<SlotMap> m = SlotMap::from_json(r->kvs[0].value);
    return m.is_ok() ? std::optional<SlotMap>(std::move(*m)) : std::nullopt;
  }
  void register_node(const std::string& id, int64_t lease) {
    ASSERT_TRUE(client.put(node_key("t", id), node_to_json(node(id)), lease).is_ok());
  }
  testing::EtcdProcess etcd;
  EtcdClient client{{{etcd.endpoint()}, milliseconds(2000), {}}};
};

TEST_F(ControllerTest, OneLeadsAndTheMapFollowsTheNodes) {
  const int64_t lease_a = *client.grant_lease(30);
  const int64_t lease_b = *client.grant_lease(30);
  register_node("a", lease_a);
  register_node("b", lease_b);
  auto first = std::make_unique<Controller>(options("a"));
  auto second = std::make_unique<Controller>(options("b"));
  ASSERT_TRUE(eventually([&] { return first->leading() || second->leading(); }));
  EXPECT_FALSE(first->leading() && second->leading());
  ASSERT_TRUE(eventually([&] {
    auto m = stored_map();
    return m && m->nodes().size() == 2 && m->unowned_slots() == 0;
  }));
  // b dies: its lease goes, and with it its registration.
  ASSERT_TRUE(client.revoke(lease_b).is_ok());
  ASSERT_TRUE(eventually([&] {
    auto m = stored_map();
    return m && m->nodes().size() == 1 && m->slots_owned_by(0) == kSlotCount;
  }));
  // The leader goes: the other takes over and keeps the map current.
  if (second->leading()) std::swap(first, second);
  first.reset();
  ASSERT_TRUE(eventually([&] { return second->leading(); }));
  const uint64_t version = stored_map()->version();
  register_node("c", lease_a);
  ASSERT_TRUE(eventually([&] {
    auto m = stored_map();
    return m && m->version() > version && m->index_of("c").has_value();
  }));
  // c's share moves first; once its owner reports it moved, c owns it.
  const SlotMap moving = *stored_map();
  EXPECT_EQ(moving.slots_owned_by(*moving.index_of("c")), 0u);
  ASSERT_EQ(moving_to(moving, "c"), kSlotCount / 2);
  for (const auto& [id, report] : all_moved(moving))
    ASSERT_TRUE(client.put(moved_key("t", id), report.to_json()).is_ok());
  ASSERT_TRUE(eventually([&] {
    auto m = stored_map();
    return m && m->slots_owned_by(*m->index_of("c")) == kSlotCount / 2 && moving_to(*m, "c") == 0;
  }));
}

// The map's key deleted (by hand, or a botched restore): the next map still
// outnumbers every version the nodes have served, so they all take it.
TEST_F(ControllerTest, ADeletedMapComesBackWithANewerVersion) {
  const int64_t lease = *client.grant_lease(30);
  register_node("a", lease);
  register_node("b", lease);
  auto controller = std::make_unique<Controller>(options("a"));
  ASSERT_TRUE(eventually([&] {
    auto m = stored_map();
    return m && m->nodes().size() == 2 && m->unowned_slots() == 0;
  }));
  // Many writes to etcd since: revisions run ahead of map versions.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(client.put("/elsewhere", std::to_string(i)).is_ok());
  const uint64_t served = stored_map()->version();
  ASSERT_TRUE(client.del(slot_map_key("t")).is_ok());
  ASSERT_TRUE(eventually([&] {
    auto m = stored_map();
    return m && m->unowned_slots() == 0;
  }));
  EXPECT_GT(stored_map()->version(), served);
}

}  // namespace
}  // namespace tierkv::cluster
