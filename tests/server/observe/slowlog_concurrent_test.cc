// SlowLog: Redis's argument cut, the threshold, the length cap, ids, and
// adds from several threads at once (also run under ThreadSanitizer).
#include "server/observe/slowlog.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace tierkv::server {
namespace {

std::vector<std::string_view> views(const std::vector<std::string>& args) {
  return {args.begin(), args.end()};
}

TEST(SlowLog, ThresholdInMicroseconds) {
  SlowLog log;
  EXPECT_FALSE(log.wants(0)) << "disabled until configured";
  log.configure(10000, 128);
  EXPECT_FALSE(log.wants(9'999'999));
  EXPECT_TRUE(log.wants(10'000'000));
  log.configure(0, 128);
  EXPECT_TRUE(log.wants(0));
  log.configure(-1, 128);
  EXPECT_FALSE(log.wants(UINT64_MAX - 1));
  log.configure(INT64_MAX, 128);  // no overflow into "log everything"
  EXPECT_FALSE(log.wants(UINT64_MAX - 1));
}

TEST(SlowLog, CutsArgumentsAsRedis) {
  std::vector<std::string> args;
  for (int i = 0; i < 40; ++i) args.push_back(std::to_string(i));
  args[1] = std::string(200, 'x');
  std::vector<std::string> out = slowlog_arguments(views(args), {});
  ASSERT_EQ(out.size(), 32u);
  EXPECT_EQ(out[0], "0");
  EXPECT_EQ(out[1], std::string(128, 'x') + "... (72 more bytes)");
  EXPECT_EQ(out[30], "30");
  EXPECT_EQ(out[31], "... (9 more arguments)");

  std::vector<std::string> exact(32, "a");
  EXPECT_EQ(slowlog_arguments(views(exact), {}).back(), "a") << "32 arguments are kept whole";
  std::vector<std::string> edge = {std::string(128, 'y')};
  EXPECT_EQ(slowlog_arguments(views(edge), {})[0], edge[0]) << "128 bytes are kept whole";
}

TEST(SlowLog, Redacts) {
  std::vector<std::string> args = {"auth", "user", "secret"};
  size_t redact[] = {1, 2};
  std::vector<std::string> out = slowlog_arguments(views(args), redact);
  EXPECT_EQ(out, (std::vector<std::string>{"auth", "(redacted)", "(redacted)"}));
}

TEST(SlowLog, KeepsNewestFirstAndCapsLength) {
  SlowLog log;
  log.configure(0, 3);
  for (int i = 0; i < 5; ++i) {
    std::string arg = std::to_string(i);
    std::string_view argv[] = {arg};
    log.add(argv, 2500, "127.0.0.1:1", i == 4 ? "named" : "");
  }
  ASSERT_EQ(log.size(), 3u);
  std::vector<SlowLogEntry> e = log.newest(10);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].id, 4u);
  EXPECT_EQ(e[0].argv[0], "4");
  EXPECT_EQ(e[0].name, "named");
  EXPECT_EQ(e[0].duration_us, 2);
  EXPECT_EQ(e[0].addr, "127.0.0.1:1");
  EXPECT_GT(e[0].unix_time_s, 1'600'000'000);
  EXPECT_EQ(e[2].id, 2u);
  EXPECT_EQ(log.newest(1).size(), 1u);
  log.configure(0, 1);  // a shorter cap drops the oldest at once
  EXPECT_EQ(log.size(), 1u);
  EXPECT_EQ(log.newest(10)[0].id, 4u);
  log.reset();
  EXPECT_EQ(log.size(), 0u);
  std::string_view argv[] = {"x"};
  log.add(argv, 0, "", "");
  EXPECT_EQ(log.newest(1)[0].id, 5u) << "ids go on after RESET";
}

TEST(SlowLogConcurrent, AddsFromManyThreads) {
  SlowLog log;
  log.configure(0, 1000);
  constexpr int kThreads = 4, kPerThread = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&log, t] {
      std::string arg = "t" + std::to_string(t);
      std::string_view argv[] = {"set", arg};
      for (int i = 0; i < kPerThread; ++i) {
        if (log.wants(1000)) log.add(argv, 1000, "127.0.0.1:2", "");
        if (i % 50 == 0) (void)log.newest(5);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(log.size(), 1000u);
  std::vector<SlowLogEntry> e = log.newest(1000);
  EXPECT_EQ(e.front().id, uint64_t{kThreads * kPerThread - 1});
  for (size_t i = 1; i < e.size(); ++i) ASSERT_EQ(e[i - 1].id, e[i].id + 1) << "newest first";
}

}  // namespace
}  // namespace tierkv::server
