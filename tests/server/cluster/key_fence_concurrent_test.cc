// KeyFence: a fenced key refuses new passes; fence() waits for the passes
// that entered before, and gives up (fencing nothing) after its timeout;
// keys not fenced are untouched; fences nest, so one fence() giving up never
// lifts another's. Threads race passes against fences to show that no pass
// ever holds a key while its fence is up.
#include "server/cluster/key_fence.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

namespace tierkv::server {
namespace {

using std::chrono::milliseconds;

TEST(KeyFenceTest, FencedKeysRefuseNewPasses) {
  auto shared = std::make_shared<KeyFence>();
  KeyFence& fence = *shared;
  const std::vector<std::string> a{"a"};
  ASSERT_TRUE(fence.fence(a, milliseconds(10)));
  std::vector<std::string_view> both{"a", "b"}, b{"b"};
  EXPECT_FALSE(fence.enter(both));
  EXPECT_TRUE(fence.enter(b));
  EXPECT_TRUE(fence.fenced("a"));
  fence.unfence(a);
  EXPECT_FALSE(fence.fenced("a"));
  EXPECT_TRUE(fence.enter(both));
  // A pass keeps its fence alive: the server may drop it first.
  std::optional<KeyFence::Pass> late = fence.enter(b);
  shared.reset();
  late.reset();
}

TEST(KeyFenceTest, FenceWaitsForPassesOrGivesUp) {
  auto shared = std::make_shared<KeyFence>();
  KeyFence& fence = *shared;
  std::vector<std::string_view> a{"a"};
  std::optional<KeyFence::Pass> pass = fence.enter(a);
  ASSERT_TRUE(pass);
  const std::vector<std::string> keys{"a"};
  EXPECT_FALSE(fence.fence(keys, milliseconds(20)));  // held: gives up
  EXPECT_FALSE(fence.fenced("a"));
  std::thread leaver([&] {
    std::this_thread::sleep_for(milliseconds(50));
    pass.reset();
  });
  EXPECT_TRUE(fence.fence(keys, milliseconds(10000)));
  leaver.join();
  EXPECT_FALSE(fence.enter(a));
  // A moved-from pass holds nothing; a moved-to one holds the key.
  fence.unfence(keys);
  std::optional<KeyFence::Pass> first = fence.enter(a);
  KeyFence::Pass second = std::move(*first);
  first.reset();
  EXPECT_FALSE(fence.fence(keys, milliseconds(10)));
}

TEST(KeyFenceTest, AFenceThatGivesUpLeavesAnothersKeysFenced) {
  auto shared = std::make_shared<KeyFence>();
  KeyFence& fence = *shared;
  const std::vector<std::string> first{"a", "b"}, second{"b", "c"};
  ASSERT_TRUE(fence.fence(first, milliseconds(10)));
  std::vector<std::string_view> c{"c"};
  std::optional<KeyFence::Pass> pass = fence.enter(c);
  ASSERT_TRUE(pass);
  EXPECT_FALSE(fence.fence(second, milliseconds(20)));  // c is held: gives up
  EXPECT_TRUE(fence.fenced("a"));
  EXPECT_TRUE(fence.fenced("b"));  // still the first fence's
  EXPECT_FALSE(fence.fenced("c"));
  std::vector<std::string_view> b{"b"};
  EXPECT_FALSE(fence.enter(b));
  pass.reset();
  ASSERT_TRUE(fence.fence(second, milliseconds(10)));
  fence.unfence(first);
  EXPECT_FALSE(fence.fenced("a"));
  EXPECT_TRUE(fence.fenced("b"));  // the second fence holds it
  fence.unfence(second);
  EXPECT_FALSE(fence.fenced("b"));
  EXPECT_TRUE(fence.enter(b));
}

TEST(KeyFenceTest, NoPassHoldsAFencedKey) {
  auto shared = std::make_shared<KeyFence>();
  KeyFence& fence = *shared;
  constexpr int kKeys = 4;
  std::array<std::atomic<int>, kKeys> holders{};
  std::array<std::atomic<bool>, kKeys> fenced{};
  std::atomic<int> violations{0};
  std::atomic<bool> stop{false};
  auto user = [&](int seed) {
    std::mt19937 rng(seed);
    for (int i = 0; i < 20000 && !stop; ++i) {
      const int k = static_cast<int>(rng() % kKeys);
      const std::string key = "k" + std::to_string(k);
      std::vector<std::string_view> keys{key};
      if (std::optional<KeyFence::Pass> p = fence.enter(keys)) {
        holders[k].fetch_add(1);
        if (fenced[k].load()) violations.fetch_add(1);
        holders[k].fetch_sub(1);
      }
    }
  };
  std::thread u1(user, 1), u2(user, 2);
  std::mt19937 rng(3);
  for (int i = 0; i < 2000; ++i) {
    const int k = static_cast<int>(rng() % kKeys);
    const std::vector<std::string> keys{"k" + std::to_string(k)};
    if (!fence.fence(keys, milliseconds(5000))) continue;
    fenced[k].store(true);
    if (holders[k].load() != 0) violations.fetch_add(1);
    fenced[k].store(false);
    fence.unfence(keys);
  }
  stop = true;
  u1.join();
  u2.join();
  EXPECT_EQ(violations.load(), 0);
}

}  // namespace
}  // namespace tierkv::server
