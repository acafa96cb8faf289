// ClientInfo: an identity published by the connection's thread is read
// whole by any other thread (never half of one publish and half of
// another), and kill is granted once however many threads ask.
#include "server/net/client_info.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tierkv::server {
namespace {

ClientInfo::Identity identity_of(int i) {
  ClientInfo::Identity who;
  who.name = "name-" + std::to_string(i);
  who.lib_name = "lib-" + std::to_string(i);
  who.lib_ver = std::to_string(i);
  who.user = "user-" + std::to_string(i);
  who.proto = 2 + i % 2;
  who.no_evict = i % 3 == 0;
  who.no_touch = i % 5 == 0;
  return who;
}

TEST(ClientInfoConcurrentTest, ReadersSeeWholeIdentities) {
  ClientInfo info;
  info.publish(identity_of(0));
  std::atomic<bool> done{false};
  std::atomic<int> torn{0}, reads{0}, ready{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      bool first = true;
      while (first || !done.load()) {
        const ClientInfo::Identity who = info.identity();
        const int i = std::stoi(who.lib_ver);
        const ClientInfo::Identity want = identity_of(i);
        if (who.name != want.name || who.lib_name != want.lib_name || who.user != want.user ||
            who.proto != want.proto || who.no_evict != want.no_evict ||
            who.no_touch != want.no_touch)
          torn.fetch_add(1);
        reads.fetch_add(1);
        if (std::exchange(first, false)) ready.fetch_add(1);
      }
    });
  }
  // Publishing starts once every reader reads: the readers overlap the
  // publishes however the threads are scheduled.
  while (ready.load() < 3) std::this_thread::yield();
  for (int i = 1; i <= 20000; ++i) {
    info.publish(identity_of(i));
    info.set_multi(i % 7 == 0 ? i % 4 : -1);
    info.set_memory(static_cast<uint64_t>(i), static_cast<uint64_t>(2 * i));
  }
  done = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(info.identity().name, "name-20000");
  EXPECT_EQ(info.user(), "user-20000");
  EXPECT_EQ(info.memory_bytes(), 40000u);
  EXPECT_EQ(info.output_bytes(), 20000u);
}

TEST(ClientInfoConcurrentTest, KillIsGrantedOnce) {
  ClientInfo info;
  std::atomic<int> granted{0};
  std::vector<std::thread> killers;
  for (int k = 0; k < 4; ++k)
    killers.emplace_back([&] { granted.fetch_add(info.mark_killed() ? 1 : 0); });
  for (std::thread& t : killers) t.join();
  EXPECT_EQ(granted.load(), 1);
  EXPECT_FALSE(info.mark_killed());
}

}  // namespace
}  // namespace tierkv::server
