// FlashIndex::keys_from: the bounded walk by key hash behind SCAN and KEYS,
// alone and while other threads add and remove keys (also run under
// ThreadSanitizer in CI), over keyed entries and over compact ones (whose
// keys are read through the KeyReader).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "core/hash.h"
#include "flash/flash_index.h"

namespace tierkv::flash {
namespace {

uint64_t stable_loc(int i) {
  return location::pack(1, uint64_t(1 + i) * 4096, 200);
}
uint64_t churn_loc(int round, int i) {
  return location::pack(2 + round, uint64_t(1 + i) * 4096, 200);
}

// The walk over keyed entries (false) or compact ones (true), with every
// key the tests write "on flash" from the start: read-only while threads run.
class FlashIndexWalkTest : public ::testing::TestWithParam<bool> {
 protected:
  FlashIndexWalkTest() {
    for (int i = 0; i < 20000; ++i) book_[stable_loc(i)] = "k" + std::to_string(i);
    for (int round = 0; round < 200; ++round) {
      for (int i = 0; i < 200; ++i)
        book_[churn_loc(round, i)] = "tmp" + std::to_string(round * 200 + i);
    }
  }
  void attach(FlashIndex& index) {
    index.set_key_reader([this](uint64_t l) -> std::optional<std::string> {
      auto it = book_.find(l);
      if (it == book_.end()) return std::nullopt;
      return it->second;
    });
  }
  uint32_t hint() const { return GetParam() ? 1 : 0; }
  void add_keys(FlashIndex& index, int n) {
    attach(index);
    for (int i = 0; i < n; ++i) {
      std::string key = "k" + std::to_string(i);
      ASSERT_TRUE(index.add(key, hash64(key), 0, 1, 100, stable_loc(i), hint()));
    }
    EXPECT_EQ(index.compact_count(), GetParam() ? uint64_t(n) : 0u);
  }

 private:
  std::map<uint64_t, std::string> book_;
};

INSTANTIATE_TEST_SUITE_P(Entries, FlashIndexWalkTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "compact" : "keyed"; });

TEST_P(FlashIndexWalkTest, PagesAreBoundedOrderedAndCoverEveryKeyOnce) {
  FlashIndex index(16, 20000);
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

TEST_P(FlashIndexWalkTest, RemovedKeysLeaveTheWalk) {
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

TEST_P(FlashIndexWalkTest, KeysPresentThroughoutAreSeenOnceDespiteChurn) {
  FlashIndex index(8);
  add_keys(index, 5000);  // k0..k4999 stay; others come and go
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    for (int round = 0; !stop.load() && round < 200; ++round) {
      for (int i = 0; i < 200; ++i) {
        std::string key = "tmp" + std::to_string(round * 200 + i);
        index.add(key, hash64(key), 0, 1, 100, churn_loc(round, i), hint());
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
