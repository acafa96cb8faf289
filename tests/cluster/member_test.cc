// Member against a real etcd: it registers under its lease and leaves when
// destroyed, takes the newest valid slot map and never an older or broken
// one, and reports down while it cannot renew its lease (etcd stopped),
// up again once etcd is back.
#include "cluster/member.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "cluster/etcd_client.h"
#include "tests/cluster/etcd_fixture.h"

namespace tierkv::cluster {
namespace {

using std::chrono::milliseconds;
using testing::eventually;

class MemberTest : public ::testing::Test {
 protected:
  MemberOptions options(std::string id) {
    MemberOptions o;
    o.etcd_endpoints = {etcd.endpoint()};
    o.cluster_name = "t";
    o.self = {std::move(id), "127.0.0.1", 7001, 1};
    o.lease_ttl = std::chrono::seconds(2);
    o.etcd_timeout = milliseconds(500);
    return o;
  }
  std::string map_json(uint64_t version) {
    SlotMap map;
    map.set_version(version);
    const size_t n = map.upsert_node({"n1", "127.0.0.1", 7001, 1});
    for (uint32_t s = 0; s < kSlotCount; ++s) map.set_owner(static_cast<uint16_t>(s), n);
    return map.to_json();
  }
  testing::EtcdProcess etcd;
  EtcdClient client{{{etcd.endpoint()}, milliseconds(2000), {}}};
};

TEST_F(MemberTest, RegistersUnderItsLeaseAndLeavesWhenDestroyed) {
  {
    Member member(options("n1"));
    ASSERT_TRUE(eventually([&] { return !client.get(node_key("t", "n1"))->kvs.empty(); }));
    const EtcdKeyValue kv = client.get(node_key("t", "n1"))->kvs.at(0);
    EXPECT_NE(kv.lease, 0);
    Result<ClusterNode> node = node_from_json(kv.value);
    ASSERT_TRUE(node.is_ok());
    EXPECT_EQ(*node, member.self());
    EXPECT_FALSE(member.up());  // no map yet
  }
  EXPECT_TRUE(client.get(node_key("t", "n1"))->kvs.empty());
}

TEST_F(MemberTest, TakesTheNewestValidMapOnly) {
  ASSERT_TRUE(client.put(slot_map_key("t"), map_json(2)).is_ok());  // before it starts
  Member member(options("n1"));
  ASSERT_TRUE(eventually([&] { return member.map() && member.map()->version() == 2; }));
  EXPECT_TRUE(eventually([&] { return member.up(); }));
  ASSERT_TRUE(client.put(slot_map_key("t"), map_json(5)).is_ok());
  ASSERT_TRUE(eventually([&] { return member.map()->version() == 5; }));
  ASSERT_TRUE(client.put(slot_map_key("t"), map_json(4)).is_ok());   // older
  ASSERT_TRUE(client.put(slot_map_key("t"), "{not a map").is_ok());  // broken
  ASSERT_TRUE(client.put(slot_map_key("t"), map_json(6)).is_ok());
  ASSERT_TRUE(eventually([&] { return member.map()->version() == 6; }));
  EXPECT_EQ(member.stats().maps_seen, 3u);  // 2, 5, 6
  EXPECT_EQ(member.map()->owner(0), 0u);
}

TEST_F(MemberTest, DownWithoutEtcdForALeaseAndUpWhenItReturns) {
  ASSERT_TRUE(client.put(slot_map_key("t"), map_json(1)).is_ok());
  Member member(options("n1"));
  ASSERT_TRUE(eventually([&] { return member.up(); }));
  etcd.stop();
  const auto stopped = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] { return !member.up(); }));
  // Down once the lease TTL (2 s) has passed since the last renewal: up() reads
  // the clock, so a late thread cannot stretch this, only the poll's wake-up.
  EXPECT_LT(std::chrono::steady_clock::now() - stopped, std::chrono::seconds(6));
  etcd.start();
  EXPECT_TRUE(eventually([&] { return member.up(); }));
  EXPECT_TRUE(eventually([&] { return !client.get(node_key("t", "n1"))->kvs.empty(); }));
  EXPECT_GT(member.stats().etcd_failures, 0u);
}

}  // namespace
}  // namespace tierkv::cluster
