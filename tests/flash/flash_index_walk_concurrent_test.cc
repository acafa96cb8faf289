// FlashIndex::keys_from: the bounded walk by key hash behind SCAN and KEYS,
// alone and while other threads add and remove keys (also run under
// ThreadSanitizer in CI).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <string>
#include <thread>

#include "core/hash.h"
#include "flash/flash_index.h"

namespace tierkv::flash {
namespace {

void add_keys(FlashIndex& index, int n) {
  for (int i = 0; i < n; ++i) {
    std::string key = "k" + std::to_string(i);
    ASSERT_TRUE(index.add(key, hash64(key), 0, 1, 100, location::pack(1, (1 + i) * 4096, 200)));
  }
}

TEST(FlashIndexWalkTest, PagesAreBoundedOrderedAndCoverEveryKeyOnce) {
  FlashIndex index(16);
  add_keys(index, 20000);
  for (size_t count : {1u, 10u, 97u, 1000u}) {
    std::multiset<std::string> seen;
    uint64_t cursor = 0;
    uint64_t last_hash = 0;
    size_t pages = 0;
    do {
      uint64_t next = 0;
      std::vector<std::string> page = index.keys_from(cursor, count, &next);
      // One page: at most `count` keys, whatever the index holds.
      ASSERT_LE(page.size(), count);
      for (const std::string& k : page) {
        uint64_t h = hash64(k);
        ASSERT_GE(h, cursor);
        ASSERT_TRUE(next == 0 || h < next);
        ASSERT_TRUE(seen.empty() || h > last_hash);
        last_hash = h;
        seen.insert(k);
      }
      ASSERT_TRUE(next == 0 || next > cursor);
      cursor = next;
    } while (cursor != 0 && ++pages < 100000);
    ASSERT_EQ(seen.size(), 20000u) << count;
    EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), 20000u) << count;
    // Full pages except where a shard ran out first: about count keys each.
    EXPECT_LE(pages, 20000 / count * 2 + 2) << count;
  }
}

TEST(FlashIndexWalkTest, RemovedKeysLeaveTheWalk) {
  FlashIndex index(4);
  add_keys(index, 100);
  for (int i = 0; i < 100; i += 2) {
    std::string key = "k" + std::to_string(i);
    ASSERT_TRUE(index.remove(key, hash64(key)));
  }
  uint64_t next = 1;
  std::vector<std::string> all = index.keys_from(0, 1000, &next);
  EXPECT_EQ(next, 0u);
  EXPECT_EQ(all.size(), 50u);
  for (const std::string& k : all) EXPECT_EQ(std::stoi(k.substr(1)) % 2, 1) << k;
  index.clear();
  EXPECT_TRUE(index.keys_from(0, 10, &next).empty());
  EXPECT_EQ(next, 0u);
}

TEST(FlashIndexWalkTest, KeysPresentThroughoutAreSeenOnceDespiteChurn) {
  FlashIndex index(8);
  add_keys(index, 5000);  // k0..k4999 stay; others come and go
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    for (int round = 0; !stop.load() && round < 200; ++round) {
      for (int i = 0; i < 200; ++i) {
        std::string key = "tmp" + std::to_string(round * 200 + i);
        index.add(key, hash64(key), 0, 1, 100, location::pack(2, (1 + i) * 4096, 200));
      }
      for (int i = 0; i < 200; ++i) {
        std::string key = "tmp" + std::to_string(round * 200 + i);
        index.remove(key, hash64(key));
      }
    }
  });
  for (int walk = 0; walk < 5; ++walk) {
    std::multiset<std::string> stable;
    uint64_t cursor = 0;
    size_t pages = 0;
    do {
      uint64_t next = 0;
      for (std::string& k : index.keys_from(cursor, 64, &next))
        if (k[0] == 'k') stable.insert(std::move(k));
      cursor = next;
    } while (cursor != 0 && ++pages < 100000);
    ASSERT_EQ(stable.size(), 5000u);
    EXPECT_EQ(std::set<std::string>(stable.begin(), stable.end()).size(), 5000u);
  }
  stop.store(true);
  churn.join();
}

}  // namespace
}  // namespace tierkv::flash
