// ExecGate: an exclusive holder excludes every slot's holders, and slot
// holders on different threads do not exclude each other.
#include "server/commands/exec_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace tierkv::server {
namespace {

TEST(ExecGate, ExclusiveWaitsForSharedAndBlocksIt) {
  ExecGate gate(2);
  ExecGate::Guard shared = gate.shared(1);
  std::atomic<bool> got{false};
  std::thread t([&] {
    ExecGate::Guard all = gate.exclusive();
    got = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got.load());  // slot 1 is held
  shared.release();
  t.join();
  EXPECT_TRUE(got.load());
}

TEST(ExecGate, SlotsDoNotExcludeEachOther) {
  ExecGate gate(2);
  ExecGate::Guard s0 = gate.shared(0);
  std::atomic<bool> got{false};
  std::thread t([&] {
    ExecGate::Guard s1 = gate.shared(1);
    got = true;
  });
  t.join();  // would hang if slots were one lock
  EXPECT_TRUE(got.load());
}

// Two shared threads each move one unit between two counters (a torn state
// is visible in between); exclusive readers must always see the sum whole.
TEST(ExecGate, ExclusiveSeesNoHalfDoneSharedWork) {
  ExecGate gate(3);
  int64_t a[2] = {0, 0}, b[2] = {0, 0};  // per slot, so shared holders never race
  std::atomic<bool> stop{false};
  std::atomic<int> running{0};
  std::vector<std::thread> writers;
  for (size_t slot = 0; slot < 2; ++slot) {
    writers.emplace_back([&, slot] {
      running++;
      while (!stop.load(std::memory_order_relaxed)) {
        ExecGate::Guard g = gate.shared(slot);
        ++a[slot];
        ++b[slot];
      }
    });
  }
  while (running.load() < 2) std::this_thread::yield();
  // Until both writers made progress between exclusive sections (bounded in
  // time: a slow sanitizer build must not hang the test).
  int torn = 0, sections = 0;
  int64_t seen[2] = {0, 0};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((sections < 2000 || seen[0] < 100 || seen[1] < 100) &&
         std::chrono::steady_clock::now() < deadline) {
    {
      ExecGate::Guard all = gate.exclusive();
      for (size_t slot = 0; slot < 2; ++slot) {
        torn += a[slot] != b[slot];
        seen[slot] = a[slot];
      }
    }
    ++sections;
    std::this_thread::yield();  // let the writers in between sections
  }
  stop = true;
  for (auto& w : writers) w.join();
  EXPECT_EQ(torn, 0);
  EXPECT_GE(seen[0], 100);  // the writers did run between the exclusive sections
  EXPECT_GE(seen[1], 100);
}

}  // namespace
}  // namespace tierkv::server
