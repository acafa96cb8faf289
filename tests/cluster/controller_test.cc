// Controller: next_map() gives live nodes every slot by weight and drops
// dead ones, changing nothing when nothing changed; against a real etcd,
// one of two controllers leads, writes the map the registered nodes need,
// follows a node's death, and hands over when the leader goes.
#include "cluster/controller.h"

#include <gtest/gtest.h>

#include <functional>
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

TEST(NextMapTest, JoinsLeavesAndStaysPut) {
  const SlotMap first = next_map(nullptr, {node("a"), node("b")});
  EXPECT_EQ(first.version(), 1u);
  EXPECT_EQ(first.unowned_slots(), 0u);
  EXPECT_EQ(first.slots_owned_by(0), 8192u);
  EXPECT_EQ(next_map(&first, {node("a"), node("b")}).version(), 1u);  // nothing changed
  const SlotMap joined = next_map(&first, {node("a"), node("b"), node("c", 2)});
  EXPECT_EQ(joined.version(), 2u);
  EXPECT_EQ(joined.slots_owned_by(*joined.index_of("c")), 8192u);
  const SlotMap left = next_map(&joined, {node("a"), node("c", 2)});
  EXPECT_FALSE(left.index_of("b"));
  EXPECT_EQ(left.unowned_slots(), 0u);
  // a kept every slot it had: only b's went, to both survivors.
  for (uint32_t s = 0; s < kSlotCount; ++s) {
    const auto slot = static_cast<uint16_t>(s);
    if (joined.owner(slot) == *joined.index_of("a")) {
      EXPECT_EQ(left.owner(slot), *left.index_of("a"));
    }
  }
  const SlotMap drained = next_map(&left, {node("a", 0), node("c", 2)});
  EXPECT_EQ(drained.slots_owned_by(*drained.index_of("a")), 0u);
}

class ControllerTest : public ::testing::Test {
 protected:
  ControllerOptions options(std::string id) {
    return {{etcd.endpoint()}, "t", std::move(id), std::chrono::seconds(2), milliseconds(100),
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
  EtcdClient client{{{etcd.endpoint()}, milliseconds(2000)}};
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
}

}  // namespace
}  // namespace tierkv::cluster
