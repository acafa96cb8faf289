#include "store/store.h"
#include "store/store_tiers.h"
#include "tests/store/store_test_util.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <thread>

#include "core/clock.h"

namespace tierkv {
namespace {

Config small_config() {
  Config c;
  c.memory = 16 << 20;
  c.chunk_size = 64 << 10;
  c.memory_shards = 4;
  c.active_expire_hz = 0;
  c.flash_size = 0;  // memory only: tiered behaviour is in tiered_store_test.cc
  return c;
}

// (Not "lit" + std::to_string(i): GCC 12 warns falsely about it at -O3.)
std::string name(const char* prefix, int i) {
  std::string out(prefix);
  out += std::to_string(i);
  return out;
}

std::unique_ptr<Store> open_store(const Config& c = small_config()) {
  auto s = Store::open(c);
  EXPECT_TRUE(s) << s.status().to_string();
  return s ? std::move(*s) : nullptr;
}

TEST(StoreTest, OpenRejectsBadConfig) {
  Config c = small_config();
  c.chunk_size = 100000;
  EXPECT_EQ(Store::open(c).status().code(), StatusCode::kInvalidArgument);
  c = small_config();
  c.eviction_policy = static_cast<EvictionPolicyKind>(9);  // no such policy
  auto r = Store::open(c);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("'eviction-policy'"), std::string::npos);
}

TEST(StoreTest, ConfigReachesTheMemoryTier) {
  Config c = small_config();
  c.eviction_policy = EvictionPolicyKind::kSieve;
  auto s = open_store(c);
  EXPECT_EQ(StoreTiers::memory(*s).chunk_size(), 64u << 10);
  EXPECT_EQ(StoreTiers::memory(*s).budget_bytes(), 16 << 20);
}

TEST(StoreTest, PutGetRemove) {
  auto s = open_store();
  auto w = s->put("k", "hello");
  ASSERT_TRUE(w);
  EXPECT_TRUE(w->written);
  auto v = s->get("k");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->to_string(), "hello");
  EXPECT_EQ(v->version(), w->version);
  EXPECT_EQ(s->size(), 1u);
  EXPECT_TRUE(s->exists("k"));
  EXPECT_TRUE(s->remove("k"));
  EXPECT_FALSE(s->remove("k"));
  EXPECT_EQ(s->get("k").status().code(), StatusCode::kNotFound);
  StoreStats st = s->stats();
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(s->metrics().counter("tierkv_keyspace_hits_total", "").value(), 1u);
}

TEST(StoreTest, SharedMetricsRegistry) {
  MetricsRegistry registry;
  auto s = Store::open(small_config(), &registry);
  ASSERT_TRUE(s);
  ASSERT_TRUE((*s)->put("k", "v"));
  ASSERT_TRUE((*s)->get("k"));
  EXPECT_EQ(&(*s)->metrics(), &registry);
  EXPECT_NE(registry.render_prometheus().find("tierkv_keyspace_hits_total 1"), std::string::npos);
}

TEST(StoreTest, GetRangeAcrossChunks) {
  auto s = open_store();
  std::string value;
  for (int i = 0; i < 200000; ++i) value += static_cast<char>('a' + i % 26);
  ASSERT_TRUE(s->put("big", value));
  EXPECT_EQ(s->stat("big")->chunks.size(), 4u);  // 3 x 64 KiB + 3392 bytes
  auto r = s->get("big", 65000, 2000);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->segment_count(), 2u);
  EXPECT_EQ(r->to_string(), value.substr(65000, 2000));
  EXPECT_EQ(s->get("big", 199990, 100)->to_string(), value.substr(199990));
  EXPECT_EQ(s->get("none", 0, 1).status().code(), StatusCode::kNotFound);
}

TEST(StoreTest, StreamingWriteWithBeginPutAndCommit) {
  auto s = open_store();
  auto w = s->begin_put("stream", 150000);
  ASSERT_TRUE(w);
  EXPECT_FALSE(s->exists("stream"));
  std::string piece(50000, 'p');
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w->append(piece));
  auto r = s->commit(std::move(*w));
  ASSERT_TRUE(r);
  EXPECT_EQ(s->get("stream")->to_string(), std::string(150000, 'p'));
}

TEST(StoreTest, BatchedForms) {
  auto s = open_store();
  std::vector<std::pair<std::string_view, std::string_view>> items = {
      {"a", "1"}, {"b", "22"}, {"c", "333"}};
  auto puts = s->put_batch(items);
  ASSERT_EQ(puts.size(), 3u);
  for (auto& p : puts) EXPECT_TRUE(p && p->written);

  std::vector<std::string_view> keys = {"a", "missing", "c", "b"};
  std::vector<Result<ObjectView>> gets;
  for (std::string_view k : keys) gets.push_back(s->get(k));
  EXPECT_EQ(gets[0]->to_string(), "1");
  EXPECT_EQ(gets[1].status().code(), StatusCode::kNotFound);
  EXPECT_EQ(gets[2]->to_string(), "333");
  EXPECT_EQ(gets[3]->to_string(), "22");

  EXPECT_EQ(s->exist(keys), (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(s->exist(keys, ExistOptions{.prefetch_to_memory = true}),
            (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(s->exist({}), std::vector<bool>{});

  std::vector<std::string_view> del = {"a", "missing", "b"};
  EXPECT_EQ(s->remove_batch(del), 2u);
  EXPECT_EQ(s->exist(keys), (std::vector<bool>{false, false, true, false}));
}

TEST(StoreTest, BatchedPutReportsEachItem) {
  auto s = open_store();
  testing::set_object_limits(*s, 4, 1 << 20);
  std::vector<std::pair<std::string_view, std::string_view>> items = {
      {"ok", "1"}, {"too-long-key", "2"}, {"ok2", "3"}};
  auto puts = s->put_batch(items);
  EXPECT_TRUE(puts[0]);
  EXPECT_EQ(puts[1].status().code(), StatusCode::kTooLarge);
  EXPECT_TRUE(puts[2]);
}

TEST(StoreTest, ExistNeverPromotesOrTouches) {
  Config c = small_config();
  c.eviction_policy = EvictionPolicyKind::kLru;
  auto s = open_store(c);
  ASSERT_TRUE(s->put("k", "v"));
  std::vector<std::string_view> keys = {"k"};
  for (int i = 0; i < 3; ++i) s->exist(keys, ExistOptions{.prefetch_to_memory = true});
  EXPECT_EQ(s->stats().hits, 0u) << "a probe is not a read";
  EXPECT_EQ(s->stats().misses, 0u);
  EXPECT_FALSE(s->stat("k")->chunks[0].leased);
}

TEST(StoreTest, LimitsGiveTooLarge) {
  Config c = small_config();
  c.max_key_size = 8;
  c.max_object_size = 1000;
  auto s = open_store(c);
  EXPECT_EQ(s->put("123456789", "v").status().code(), StatusCode::kTooLarge);
  EXPECT_TRUE(s->put("12345678", "v"));
  EXPECT_EQ(s->put("k", std::string(1001, 'x')).status().code(), StatusCode::kTooLarge);
  EXPECT_TRUE(s->put("k", std::string(1000, 'x')));
  EXPECT_EQ(s->begin_put("k", 1001).status().code(), StatusCode::kTooLarge);
  EXPECT_EQ(s->begin_put("123456789", 1).status().code(), StatusCode::kTooLarge);
  auto msg = s->put("k", std::string(1001, 'x')).status().message();
  EXPECT_NE(msg.find("max-object-size"), std::string::npos) << msg;
  testing::set_object_limits(*s, 64, 2000);
  EXPECT_TRUE(s->put("123456789", std::string(1500, 'x')));
}

TEST(StoreTest, ObjectLargerThanMemoryIsOutOfMemory) {
  Config c = small_config();
  c.memory = 4 << 20;
  auto s = open_store(c);
  EXPECT_EQ(s->put("k", std::string(5 << 20, 'x')).status().code(), StatusCode::kOutOfMemory);
}

TEST(StoreTest, ExpiryAndScan) {
  auto s = open_store();
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(s->put(name("key:", i), "v"));
  EXPECT_TRUE(s->set_expiry("key:0", unix_time_ms() - 1));
  EXPECT_FALSE(s->set_expiry("nope", 0));
  EXPECT_FALSE(s->exists("key:0"));
  std::set<std::string> seen;
  uint64_t cursor = 0;
  do {
    ScanPage p = s->scan(cursor, 9);
    seen.insert(p.keys.begin(), p.keys.end());
    cursor = p.next_cursor;
  } while (cursor != 0);
  EXPECT_EQ(seen.size(), 99u);
  EXPECT_EQ(seen.count("key:0"), 0u);
  auto k = s->random_key();
  ASSERT_TRUE(k);
  EXPECT_TRUE(s->exists(*k));
}

TEST(StoreTest, ActiveExpiryRunsWhenConfigured) {
  Config c = small_config();
  c.active_expire_hz = 100;
  auto s = open_store(c);
  for (int i = 0; i < 50; ++i)
    ASSERT_TRUE(s->put(name("t", i), "v", WriteOptions{.expire_at_ms = unix_time_ms() + 20}));
  for (int i = 0; i < 200 && s->size() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(s->size(), 0u);
}

TEST(StoreTest, FlushAndBudget) {
  auto s = open_store();
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(s->put(name("key:", i), std::string(10000, 'v')));
  EXPECT_GT(s->stats().memory.used_bytes, 100 * 10000);
  Config smaller;
  smaller.memory = 1 << 20;
  ASSERT_TRUE(s->apply_config(ConfigApply::kMemoryBudget, smaller).is_ok());
  EXPECT_LE(s->stats().memory.used_bytes, 1 << 20);
  s->flush();
  EXPECT_EQ(s->size(), 0u);
  EXPECT_EQ(s->stats().memory.used_bytes, 0);
}

TEST(StoreTest, RemoveIfVersionIsACompareAndDelete) {
  auto s = open_store();
  ASSERT_TRUE(s->put("k", "v1").is_ok());
  uint64_t v1 = s->get("k")->version();
  ASSERT_TRUE(s->put("k", "v2").is_ok());
  EXPECT_FALSE(s->remove("k", v1));  // an older version: kept
  EXPECT_EQ(s->get("k")->to_string(), "v2");
  EXPECT_TRUE(s->remove("k", s->get("k")->version()));
  EXPECT_FALSE(s->exists("k"));
}

}  // namespace
}  // namespace tierkv
