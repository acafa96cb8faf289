// The whole server in-process with clients on several I/O threads running
// transactions, MSET and WATCH loops at once: every EXEC is isolated, MSET is
// never seen half done, WATCH retries lose no update. Run under
// ThreadSanitizer in CI (the exec gate's slots are taken on every thread).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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
using Client = testing::UnixClient;

int64_t integer_of(const std::string& reply) {
  return reply.size() > 3 && reply[0] == ':' ? std::stoll(reply.substr(1)) : -1;
}

class TxnServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.flash_size = 0;  // memory only: no flash file in the working directory
    config_.port = 0;
    config_.metrics_port = 0;
    config_.io_threads = 3;
    config_.memory = int64_t{64} << 20;
    config_.unixsocket = "/tmp/tierkv-txn-test-" + std::to_string(::getpid()) + ".sock";
    auto store = Store::open(config_, &metrics_);
    ASSERT_TRUE(store.is_ok());
    store_ = std::move(store).value();
    server_ = std::make_unique<Server>(config_, *store_, metrics_);
    ASSERT_TRUE(server_->start().is_ok());
  }
  void TearDown() override {
    std::thread waiter([&] { server_->wait(); });
    Client last(config_.unixsocket);
    last.send(command({"SHUTDOWN", "NOSAVE"}));
    waiter.join();
  }

  // MULTI INCR INCR GET EXEC: the two INCRs of one EXEC must be adjacent.
  void incr_twice(Client& c, std::vector<int64_t>& firsts, std::atomic<int>& failures) {
    c.send(command({"MULTI"}) + command({"INCR", "ser"}) + command({"INCR", "ser"}) +
           command({"GET", "ser"}) + command({"EXEC"}));
    bool ok = c.read_reply() == "+OK\r\n";
    for (int i = 0; i < 3; ++i) ok = ok && c.read_reply() == "+QUEUED\r\n";
    ok = ok && c.read_reply() == "*3\r\n";
    int64_t first = integer_of(c.read_reply());
    int64_t second = integer_of(c.read_reply());
    std::string got = c.read_reply();
    std::string want = std::to_string(second);
    ok = ok && second == first + 1 &&
         got == "$" + std::to_string(want.size()) + "\r\n" + want + "\r\n";
    if (!ok) failures++;
    firsts.push_back(first);
  }

  // WATCH w, GET w, MULTI, SET w n+1, EXEC until EXEC runs.
  void watched_increment(Client& c, std::atomic<int>& failures, std::atomic<int>& aborts) {
    for (;;) {
      c.send(command({"WATCH", "w"}) + command({"GET", "w"}));
      if (c.read_reply() != "+OK\r\n") failures++;
      std::string got = c.read_reply();
      size_t body = got.find("\r\n") + 2;
      int64_t n = got == "$-1\r\n" ? 0 : std::stoll(got.substr(body));
      c.send(command({"MULTI"}) + command({"SET", "w", std::to_string(n + 1)}) + command({"EXEC"}));
      if (c.read_reply() != "+OK\r\n") failures++;
      if (c.read_reply() != "+QUEUED\r\n") failures++;
      std::string exec = c.read_reply();
      if (exec == "*1\r\n") {
        if (c.read_reply() != "+OK\r\n") failures++;
        return;
      }
      if (exec != "*-1\r\n") failures++;
      aborts++;
    }
  }

  Config config_;
  MetricsRegistry metrics_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Server> server_;
};

TEST_F(TxnServerTest, ExecMsetAndWatchUnderConcurrency) {
  constexpr int kTxnClients = 3, kRounds = 100, kWatchers = 2, kIncrements = 60;
  std::atomic<int> failures{0}, aborts{0}, torn{0};
  std::atomic<bool> stop{false};
  std::vector<std::vector<int64_t>> firsts(kTxnClients);
  std::vector<std::thread> threads;
  for (int t = 0; t < kTxnClients; ++t) {
    threads.emplace_back([&, t] {
      Client c(config_.unixsocket);
      for (int i = 0; i < kRounds; ++i) incr_twice(c, firsts[t], failures);
    });
  }
  for (int t = 0; t < kWatchers; ++t) {
    threads.emplace_back([&] {
      Client c(config_.unixsocket);
      for (int i = 0; i < kIncrements; ++i) watched_increment(c, failures, aborts);
    });
  }
  std::thread reader([&] {
    Client c(config_.unixsocket);
    while (!stop.load()) {
      c.send(command({"MGET", "a", "b"}));
      if (c.read_reply() != "*2\r\n") failures++;
      if (c.read_reply() != c.read_reply()) torn++;
    }
  });
  {
    Client c(config_.unixsocket);
    for (int i = 0; i < 300; ++i) {
      std::string v = std::to_string(i);
      c.send(command({"MSET", "a", v, "b", v}));
      if (c.read_reply() != "+OK\r\n") failures++;
    }
  }
  for (auto& th : threads) th.join();
  stop = true;
  reader.join();

  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(torn.load(), 0);
  std::vector<int64_t> all;
  for (const auto& f : firsts) all.insert(all.end(), f.begin(), f.end());
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], static_cast<int64_t>(2 * i + 1));
  Client c(config_.unixsocket);
  c.send(command({"GET", "w"}));
  std::string want = std::to_string(kWatchers * kIncrements);
  EXPECT_EQ(c.read_reply(), "$" + std::to_string(want.size()) + "\r\n" + want + "\r\n");
}

}  // namespace
}  // namespace tierkv::server
