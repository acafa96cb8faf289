// EtcdClient against a real etcd (one member, loopback): what it writes it
// reads back byte for byte, conditional puts and leases behave as etcd
// documents, a watch sees every change in order, and an endpoint that is
// down is skipped for one that answers.
#include "cluster/etcd_client.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "tests/cluster/etcd_fixture.h"

namespace tierkv::cluster {
namespace {

using std::chrono::milliseconds;

TEST(Base64Test, RoundTripsEveryLength) {
  std::mt19937 rng(7);
  for (size_t n = 0; n < 70; ++n) {
    std::string bytes(n, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    Result<std::string> back = base64_decode(base64_encode(bytes));
    ASSERT_TRUE(back.is_ok());
    EXPECT_EQ(*back, bytes) << n;
  }
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_FALSE(base64_decode("Zm9").is_ok());
  EXPECT_FALSE(base64_decode("Zm!v").is_ok());
}

TEST(PrefixEndTest, NextKeyAfterThePrefix) {
  EXPECT_EQ(prefix_end("abc"), "abd");
  EXPECT_EQ(prefix_end(std::string("a\xff", 2)), "b");
  EXPECT_EQ(prefix_end(std::string("\xff", 1)), std::string(1, '\0'));
}

class EtcdClientTest : public ::testing::Test {
 protected:
  testing::EtcdProcess etcd;
  EtcdClient client{{{etcd.endpoint()}, milliseconds(2000), {}}};
};

TEST_F(EtcdClientTest, PutGetAndPrefixKeepBytes) {
  const std::string key("tierkv/t/\0bin\xff", 14);
  const std::string value("v\0\x80\n", 4);
  Result<int64_t> rev = client.put(key, value);
  ASSERT_TRUE(rev.is_ok()) << rev.status().to_string();
  Result<EtcdRange> got = client.get(key);
  ASSERT_TRUE(got.is_ok());
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].key, key);
  EXPECT_EQ(got->kvs[0].value, value);
  EXPECT_EQ(got->kvs[0].mod_revision, *rev);
  ASSERT_TRUE(client.put("tierkv/u", "other").is_ok());
  Result<EtcdRange> under_t = client.get_prefix("tierkv/t/");
  ASSERT_TRUE(under_t.is_ok());
  EXPECT_EQ(under_t->kvs.size(), 1u);
  ASSERT_TRUE(client.del(key).is_ok());
  EXPECT_TRUE(client.get(key)->kvs.empty());
  EXPECT_GT(client.round_trips(), 5u);
  EXPECT_EQ(client.failures(), 0u);
}

TEST_F(EtcdClientTest, PutIfIsCompareAndSwap) {
  Result<bool> created = client.put_if("map", "v1", 0);
  ASSERT_TRUE(created.is_ok()) << created.status().to_string();
  EXPECT_TRUE(*created);
  EXPECT_FALSE(*client.put_if("map", "again", 0));  // exists already
  const int64_t rev = client.get("map")->kvs.at(0).mod_revision;
  EXPECT_FALSE(*client.put_if("map", "stale", rev - 1));
  EXPECT_TRUE(*client.put_if("map", "v2", rev));
  EXPECT_EQ(client.get("map")->kvs.at(0).value, "v2");
}

TEST_F(EtcdClientTest, LeasedKeysGoWithTheirLease) {
  Result<int64_t> lease = client.grant_lease(30);
  ASSERT_TRUE(lease.is_ok()) << lease.status().to_string();
  ASSERT_TRUE(client.put("node/a", "up", *lease).is_ok());
  EXPECT_EQ(client.get("node/a")->kvs.at(0).lease, *lease);
  Result<int64_t> ttl = client.keep_alive(*lease);
  ASSERT_TRUE(ttl.is_ok()) << ttl.status().to_string();
  EXPECT_GT(*ttl, 0);
  ASSERT_TRUE(client.revoke(*lease).is_ok());
  EXPECT_TRUE(client.get("node/a")->kvs.empty());
  EXPECT_EQ(client.keep_alive(*lease).status().code(), StatusCode::kNotFound);
}

TEST_F(EtcdClientTest, AnUnrenewedLeaseExpires) {
  const int64_t lease = *client.grant_lease(1);
  ASSERT_TRUE(client.put("node/b", "up", lease).is_ok());
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {  // etcd expires it within ~1-2 s
    std::this_thread::sleep_for(milliseconds(100));
    gone = client.get("node/b")->kvs.empty();
  }
  EXPECT_TRUE(gone);
}

TEST_F(EtcdClientTest, WatchSeesEveryChangeInOrder) {
  const int64_t start = *client.put("watched", "v0") + 1;
  std::vector<EtcdEvent> seen;
  std::stop_source stop;
  Status watch_status;
  std::thread watcher([&] {
    EtcdClient own({{etcd.endpoint()}, milliseconds(2000), {}});
    watch_status = own.watch("watched", start, stop.get_token(), [&](const auto& events) {
      seen.insert(seen.end(), events.begin(), events.end());
      return seen.size() < 4;
    });
  });
  for (const char* v : {"v1", "v2", "v3"}) ASSERT_TRUE(client.put("watched", v).is_ok());
  ASSERT_TRUE(client.del("watched").is_ok());
  // A watch that saw nothing in 10 s is stopped, and the checks below fail.
  std::jthread guard([&](std::stop_token done) {
    for (int i = 0; i < 100 && !done.stop_requested(); ++i)
      std::this_thread::sleep_for(milliseconds(100));
    stop.request_stop();
  });
  watcher.join();
  guard.request_stop();
  EXPECT_TRUE(watch_status.is_ok()) << watch_status.to_string();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].kv.value, "v1");
  EXPECT_EQ(seen[2].kv.value, "v3");
  EXPECT_TRUE(seen[3].deleted);
  EXPECT_FALSE(seen[2].deleted);
}

TEST_F(EtcdClientTest, ADeadEndpointIsSkipped) {
  const std::string dead = "http://127.0.0.1:" + std::to_string(testing::free_port());
  EtcdClient only_dead({{dead}, milliseconds(500), {}});
  Result<EtcdRange> none = only_dead.get("x");
  EXPECT_EQ(none.status().code(), StatusCode::kIOError);
  EXPECT_EQ(only_dead.failures(), 1u);
  EtcdClient failover({{dead, etcd.endpoint()}, milliseconds(500), {}});
  EXPECT_TRUE(failover.put("x", "1").is_ok());
  EXPECT_TRUE(failover.get("x").is_ok());
  EXPECT_EQ(failover.failures(), 1u);  // the second call went to the live one first
}

TEST_F(EtcdClientTest, EtcdDownIsAnErrorAndBackIsFine) {
  ASSERT_TRUE(client.put("k", "1").is_ok());
  etcd.stop();
  EXPECT_EQ(client.get("k").status().code(), StatusCode::kIOError);
  etcd.start();
  Result<EtcdRange> back = client.get("k");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->kvs.at(0).value, "1");
}

}  // namespace
}  // namespace tierkv::cluster
