// The whole server in-process, over a Unix socket, with several clients on
// several I/O threads at once: pipelined SET/GET, CLIENT LIST and CONFIG SET
// from other threads, then shutdown. Run under ThreadSanitizer in CI.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "server/net/server.h"
#include "store/store.h"
#include "tests/server/net/unix_client.h"

// GCC 12 reports a false -Wrestrict on "literal" + std::string (GCC PR 105329).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

namespace tierkv::server {
namespace {

using testing::command;
using BlockingClient = testing::UnixClient;

TEST(ServerConcurrentTest, ManyClientsOnManyThreads) {
  Config config;
  config.flash_size = 0;  // memory only: no flash file in the working directory
  config.port = 0;
  config.metrics_port = 0;
  config.io_threads = 4;
  config.memory = int64_t{64} << 20;
  config.unixsocket = "/tmp/tierkv-server-test-" + std::to_string(::getpid()) + ".sock";
  MetricsRegistry metrics;
  auto store = Store::open(config, &metrics);
  ASSERT_TRUE(store.is_ok());
  Server server(config, **store, metrics);
  ASSERT_TRUE(server.start().is_ok());

  constexpr int kClients = 6;
  constexpr int kRounds = 200;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      BlockingClient c(config.unixsocket);
      if (!c.connected()) {
        failures++;
        return;
      }
      std::string key = "key" + std::to_string(t);
      for (int i = 0; i < kRounds; ++i) {
        std::string value = std::to_string(t * 100000 + i);
        // Pipelined: SET, GET, PING in one write.
        c.send(command({"SET", key, value}) + command({"GET", key}) + command({"PING"}));
        if (c.read_reply() != "+OK\r\n") failures++;
        std::string expected = "$" + std::to_string(value.size()) + "\r\n" + value + "\r\n";
        if (c.read_reply() != expected) failures++;
        if (c.read_reply() != "+PONG\r\n") failures++;
      }
    });
  }
  // Meanwhile: CLIENT LIST and CONFIG SET from another connection.
  threads.emplace_back([&] {
    BlockingClient admin(config.unixsocket);
    for (int i = 0; i < 50; ++i) {
      admin.send(command({"CLIENT", "LIST"}));
      std::string list = admin.read_reply();
      if (list.empty() || list[0] != '$') failures++;
      admin.send(command({"CONFIG", "SET", "maxclients", std::to_string(1000 + i)}));
      if (admin.read_reply() != "+OK\r\n") failures++;
      admin.send(command({"INFO", "stats"}));
      if (admin.read_reply().find("total_commands_processed") == std::string::npos) failures++;
    }
  });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GE(server.context().metrics().counter("tierkv_commands_processed_total", "").value(),
            uint64_t{kClients * kRounds * 3});

  // SHUTDOWN from a client makes wait() return.
  std::thread waiter([&] { server.wait(); });
  BlockingClient last(config.unixsocket);
  last.send(command({"SHUTDOWN"}));
  waiter.join();
  EXPECT_EQ(::access(config.unixsocket.c_str(), F_OK), -1) << "socket file removed";
}

}  // namespace
}  // namespace tierkv::server
