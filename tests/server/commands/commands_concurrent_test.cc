// Read-modify-write commands under concurrency: handlers run on several
// threads at once, as the I/O threads run them; results must be exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "tests/server/commands/command_harness.h"

namespace tierkv::server {
namespace {

constexpr int kThreads = 8;

template <typename Fn>
void run_threads(Fn&& fn) {
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { fn(t); });
  for (std::thread& t : threads) t.join();
}

TEST(CommandsConcurrentTest, IncrIsExact) {
  CommandHarness h;
  constexpr int kPerThread = 1000;
  run_threads([&](int) {
    for (int i = 0; i < kPerThread; ++i) h.run({"INCRBY", "n", "2"});
  });
  EXPECT_EQ(h.run({"GET", "n"}), bulk(std::to_string(kThreads * kPerThread * 2)));
}

TEST(CommandsConcurrentTest, AppendAndIncrByFloatLoseNothing) {
  CommandHarness h;
  constexpr int kPerThread = 200;
  run_threads([&](int t) {
    for (int i = 0; i < kPerThread; ++i) {
      h.run({"APPEND", "log", std::string(1, static_cast<char>('a' + t))});
      h.run({"INCRBYFLOAT", "f", "0.5"});
    }
  });
  std::string log = h.store().get("log")->to_string();
  ASSERT_EQ(log.size(), size_t{kThreads * kPerThread});
  for (int t = 0; t < kThreads; ++t)
    EXPECT_EQ(std::count(log.begin(), log.end(), static_cast<char>('a' + t)), kPerThread);
  EXPECT_EQ(h.run({"GET", "f"}), bulk(std::to_string(kThreads * kPerThread / 2)));
}

TEST(CommandsConcurrentTest, MsetnxIsAllOrNothing) {
  CommandHarness h;
  for (int round = 0; round < 20; ++round) {
    h.store().flush();
    std::atomic<int> winners{0};
    std::vector<int> won(kThreads, 0);
    run_threads([&](int t) {
      std::string v = std::to_string(t);
      std::string own = cat("own", v);
      if (h.run({"MSETNX", "a", v, "b", v, own, v, "c", v}) == integer(1)) {
        winners.fetch_add(1);
        won[t] = 1;
      }
    });
    ASSERT_LE(winners.load(), 1);
    std::string a = h.run({"GET", "a"});
    if (winners.load() == 0) {
      EXPECT_EQ(h.store().size(), 0u);
      continue;
    }
    int w = static_cast<int>(std::find(won.begin(), won.end(), 1) - won.begin());
    std::string expect = bulk(std::to_string(w));
    EXPECT_EQ(h.run({"MGET", "a", "b", "c", cat("own", std::to_string(w))}),
              cat("*4\r\n", expect, expect, expect, expect));
    EXPECT_EQ(h.store().size(), 4u);  // the losers' own keys were rolled back
  }
}

TEST(CommandsConcurrentTest, GetDelHandsOutEachValueOnce) {
  CommandHarness h;
  constexpr int kKeys = 500;
  for (int i = 0; i < kKeys; ++i)
    ASSERT_TRUE(h.store().put(cat("k", std::to_string(i)), "v").is_ok());
  std::atomic<int> taken{0};
  run_threads([&](int) {
    for (int i = 0; i < kKeys; ++i)
      if (h.run({"GETDEL", cat("k", std::to_string(i))}) == bulk("v")) taken.fetch_add(1);
  });
  EXPECT_EQ(taken.load(), kKeys);
  EXPECT_EQ(h.store().size(), 0u);
}

TEST(CommandsConcurrentTest, ReadersSeeWholeValuesDuringOverwrites) {
  CommandHarness h;
  std::string a(100 * 1024, 'a'), b(150 * 1024, 'b');
  ASSERT_EQ(h.run({"SET", "k", a}), kOk);
  std::atomic<bool> torn{false};
  run_threads([&](int t) {
    for (int i = 0; i < 50; ++i) {
      if (t % 2 == 0) {
        h.run({"SET", "k", i % 2 ? a : b});
      } else {
        std::string out = h.run({"GET", "k"});
        if (out != bulk(a) && out != bulk(b)) torn = true;
      }
    }
  });
  EXPECT_FALSE(torn.load());
}

}  // namespace
}  // namespace tierkv::server
