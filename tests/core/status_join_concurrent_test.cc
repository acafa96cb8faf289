// StatusJoin's contract: `done` runs exactly once, after the last arrival,
// with the first error (or OK); at once with zero steps; never after
// cancel(). Arrivals may come from any thread.
#include "core/status_join.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace tierkv {
namespace {

TEST(StatusJoinTest, ZeroStepsRunAtOnce) {
  int runs = 0;
  auto join = StatusJoin::make(0, [&](Status st) {
    EXPECT_TRUE(st.is_ok());
    ++runs;
  });
  EXPECT_EQ(runs, 1);
  join->cancel();  // after it ran: nothing changes
  EXPECT_EQ(runs, 1);
}

TEST(StatusJoinTest, RunsOnceAfterTheLastWithTheFirstError) {
  int runs = 0;
  Status seen;
  auto join = StatusJoin::make(3, [&](Status st) {
    seen = std::move(st);
    ++runs;
  });
  auto a = join->arrival(), b = join->arrival(), c = join->arrival();
  a(Status::ok());
  b(Status::io_error("first"));
  EXPECT_EQ(runs, 0);
  c(Status::busy("second"));
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(seen.code(), StatusCode::kIOError);
  EXPECT_EQ(seen.message(), "first");
}

TEST(StatusJoinTest, CancelledNeverRuns) {
  int runs = 0;
  auto join = StatusJoin::make(2, [&](Status) { ++runs; });
  auto a = join->arrival(), b = join->arrival();
  a(Status::ok());
  join->cancel();
  b(Status::ok());
  EXPECT_EQ(runs, 0);
}

TEST(StatusJoinTest, ArrivalsFromManyThreadsRunItOnce) {
  for (int round = 0; round < 50; ++round) {
    constexpr int kSteps = 64;
    std::atomic<int> runs{0};
    std::atomic<int> errors_seen{0};
    auto join = StatusJoin::make(kSteps, [&](Status st) {
      runs.fetch_add(1);
      if (!st.is_ok()) errors_seen.fetch_add(1);
    });
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      std::vector<StatusJoin::Callback> mine;
      for (int i = t; i < kSteps; i += 4) mine.push_back(join->arrival());
      threads.emplace_back([mine = std::move(mine), t]() mutable {
        for (auto& arrive : mine) arrive(t == 2 ? Status::busy("from thread 2") : Status::ok());
      });
    }
    join.reset();  // the arrivals alone keep it alive
    for (auto& th : threads) th.join();
    EXPECT_EQ(runs.load(), 1);
    EXPECT_EQ(errors_seen.load(), 1);
  }
}

}  // namespace
}  // namespace tierkv
