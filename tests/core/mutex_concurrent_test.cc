// core/mutex.h: MutexLock excludes other holders, including across its own
// unlock()/lock(); CondVar::wait returns holding the mutex after a notify,
// and wait_for says whether it timed out. Run under ThreadSanitizer in CI.
#include "core/mutex.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace tierkv {
namespace {

using std::chrono::milliseconds;

struct Counter {
  Mutex mu;
  int64_t value ABSL_GUARDED_BY(mu) = 0;
  int64_t relocked ABSL_GUARDED_BY(mu) = 0;
};

TEST(MutexTest, HoldersExcludeEachOther) {
  Counter c;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&c] {
      for (int i = 0; i < 20000; ++i) {
        MutexLock lock(c.mu);
        ++c.value;
        if (i % 100 != 0) continue;
        lock.unlock();  // let go in the middle, then hold it again
        lock.lock();
        ++c.relocked;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  MutexLock lock(c.mu);
  EXPECT_EQ(c.value, 4 * 20000);
  EXPECT_EQ(c.relocked, 4 * 200);
}

TEST(MutexTest, CondVarHandsOffUnderTheLock) {
  Mutex mu;
  CondVar cv;
  int stage = 0;  // under mu
  std::thread other([&] {
    MutexLock lock(mu);
    while (stage != 1) cv.wait(mu);
    stage = 2;
    cv.notify_all();
  });
  {
    MutexLock lock(mu);
    stage = 1;
    cv.notify_all();
    while (stage != 2) cv.wait(mu);
    EXPECT_EQ(stage, 2);
  }
  other.join();
}

TEST(MutexTest, WaitForTimesOutWithoutANotify) {
  Mutex mu;
  CondVar cv;
  MutexLock lock(mu);
  const auto start = std::chrono::steady_clock::now();
  bool notified = true;
  // Spurious wakes return true: loop until the deadline has passed.
  while (notified && std::chrono::steady_clock::now() - start < milliseconds(5000))
    notified = cv.wait_for(mu, milliseconds(20));
  EXPECT_FALSE(notified);
}

TEST(MutexTest, StopCondVarWakesOnThePredicateAndOnStop) {
  Mutex mu;
  StopCondVar cv;
  int ready = 0;  // under mu
  std::stop_source never;
  std::thread waiter([&] {
    MutexLock lock(mu);
    const bool ok = cv.wait(mu, never.get_token(), [&] {
      mu.assert_held();
      return ready == 1;
    });
    EXPECT_TRUE(ok);
    ready = 2;
  });
  {
    MutexLock lock(mu);
    ready = 1;
  }
  cv.notify_all();
  waiter.join();
  EXPECT_EQ(ready, 2);

  // A stop request ends a wait whose predicate never holds, long before its
  // timeout, and the wait answers the predicate (false).
  std::stop_source stop;
  bool answered = true;
  std::thread stopped([&] {
    MutexLock lock(mu);
    answered = cv.wait_for(mu, stop.get_token(), std::chrono::hours(1), [] { return false; });
  });
  stop.request_stop();
  stopped.join();
  EXPECT_FALSE(answered);
}

TEST(MutexTest, SleepUnlessStoppedSaysWhichEndedIt) {
  std::stop_source stop;
  EXPECT_TRUE(sleep_unless_stopped(stop.get_token(), milliseconds(1)));
  std::thread sleeper(
      [&] { EXPECT_FALSE(sleep_unless_stopped(stop.get_token(), std::chrono::hours(1))); });
  stop.request_stop();
  sleeper.join();
  EXPECT_FALSE(sleep_unless_stopped(stop.get_token(), std::chrono::hours(1)));
}

}  // namespace
}  // namespace tierkv
