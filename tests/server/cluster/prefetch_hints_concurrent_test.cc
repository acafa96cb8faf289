// PrefetchHints against a fake owner node: hints reach it as TIER.PREFETCH
// batches, a key hinted again within the window is not sent twice, a full
// queue drops hints (counted) without blocking the caller while the link is
// busy, and a link that cannot be made drops its batch and, for the retry
// pause, every hint to that owner.
#include "server/cluster/prefetch_hints.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tierkv::server {
namespace {

using namespace std::chrono_literals;

// Reads RESP commands from one connection and answers them: +OK to the
// login, and :0 to TIER.PREFETCH once `open` is set (until then it holds
// the reply, as a stopped node would).
class FakeOwner {
 public:
  FakeOwner() {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(listener_, 4), 0);
    EXPECT_EQ(::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
    thread_ = std::jthread([this] { serve(); });
  }
  ~FakeOwner() {
    open.store(true);
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    if (const int c = conn_.load(); c >= 0) ::shutdown(c, SHUT_RDWR);
  }
  cluster::ClusterNode node() const { return {"owner", "127.0.0.1", port_}; }
  std::vector<std::string> keys() {
    std::lock_guard lock(mu_);
    return keys_;
  }
  std::atomic<bool> open{true};
  std::atomic<int> batches{0};

 private:
  void serve() {
    conn_ = ::accept(listener_, nullptr, nullptr);
    if (conn_ < 0) return;
    for (;;) {
      std::vector<std::string> args;
      if (!read_command(args)) return;
      if (args[0] != "TIER.PREFETCH") {
        ::send(conn_, "+OK\r\n", 5, MSG_NOSIGNAL);
        continue;
      }
      {
        std::lock_guard lock(mu_);
        keys_.insert(keys_.end(), args.begin() + 1, args.end());
      }
      batches.fetch_add(1);
      while (!open.load()) std::this_thread::sleep_for(1ms);
      ::send(conn_, ":0\r\n", 4, MSG_NOSIGNAL);
    }
  }
  bool read_line(std::string& line) {
    line.clear();
    char c;
    while (::recv(conn_, &c, 1, 0) == 1) {
      if (c == '\n') return true;
      if (c != '\r') line += c;
    }
    return false;
  }
  bool read_command(std::vector<std::string>& args) {
    std::string line;
    if (!read_line(line) || line.empty() || line[0] != '*') return false;
    const int n = std::stoi(line.substr(1));
    for (int i = 0; i < n; ++i) {
      if (!read_line(line)) return false;
      std::string arg(static_cast<size_t>(std::stoi(line.substr(1))) + 2, '\0');
      size_t got = 0;
      while (got < arg.size()) {
        const ssize_t k = ::recv(conn_, arg.data() + got, arg.size() - got, 0);
        if (k <= 0) return false;
        got += static_cast<size_t>(k);
      }
      arg.resize(arg.size() - 2);
      args.push_back(std::move(arg));
    }
    return true;
  }

  int listener_ = -1;
  std::atomic<int> conn_{-1};
  uint16_t port_ = 0;
  std::mutex mu_;
  std::vector<std::string> keys_;
  std::jthread thread_;
};

template <typename Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 2000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

PrefetchHintsOptions options(size_t max_pending) {
  PrefetchHintsOptions o;
  o.max_pending = max_pending;
  o.dedup_window = std::chrono::minutes(10);
  o.io_timeout = std::chrono::seconds(60);
  o.retry_pause = std::chrono::minutes(10);
  return o;
}

TEST(PrefetchHintsTest, HintsReachTheOwnerAndRepeatsAreNotSent) {
  FakeOwner owner;
  MetricsRegistry metrics;
  PrefetchHints hints(options(64), metrics);
  for (const char* k : {"a", "b", "c"}) hints.hint(k, owner.node());
  ASSERT_TRUE(eventually([&] { return hints.stats().sent == 3; }));
  hints.hint("a", owner.node());
  EXPECT_EQ(hints.stats().deduplicated, 1u);
  EXPECT_EQ(hints.stats().sent, 3u);
  EXPECT_EQ(owner.keys(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(hints.stats().dropped, 0u);
}

TEST(PrefetchHintsTest, AFullQueueDropsWhileTheLinkIsBusy) {
  FakeOwner owner;
  owner.open.store(false);  // the owner holds its replies
  MetricsRegistry metrics;
  PrefetchHints hints(options(4), metrics);
  hints.hint("first", owner.node());
  // The sender is now waiting for the owner's reply: nothing leaves the queue.
  ASSERT_TRUE(eventually([&] { return owner.batches.load() == 1; }));
  for (int i = 0; i < 6; ++i) hints.hint("k" + std::to_string(i), owner.node());
  EXPECT_EQ(hints.stats().dropped, 2u);
  owner.open.store(true);
  ASSERT_TRUE(eventually([&] { return hints.stats().sent == 5; }));
  EXPECT_EQ(owner.keys(), (std::vector<std::string>{"first", "k0", "k1", "k2", "k3"}));
  // A dropped hint is not in the window: hinted again, it goes out.
  hints.hint("k5", owner.node());
  ASSERT_TRUE(eventually([&] { return hints.stats().sent == 6; }));
}

TEST(PrefetchHintsTest, StoppingCutsASendThatAStoppedOwnerHolds) {
  FakeOwner owner;
  owner.open.store(false);
  MetricsRegistry metrics;
  auto hints = std::make_unique<PrefetchHints>(options(64), metrics);
  hints->hint("held", owner.node());
  ASSERT_TRUE(eventually([&] { return owner.batches.load() == 1; }));
  const auto start = std::chrono::steady_clock::now();
  hints.reset();  // io_timeout is a minute: only the cut ends the wait sooner
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
}

TEST(PrefetchHintsTest, AnOwnerThatCannotBeReachedDropsEveryHintForTheRetryPause) {
  // A port that nothing listens on.
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(s);
  const cluster::ClusterNode gone{"gone", "127.0.0.1", ntohs(addr.sin_port)};
  MetricsRegistry metrics;
  PrefetchHints hints(options(64), metrics);
  hints.hint("x", gone);
  ASSERT_TRUE(eventually([&] { return hints.stats().dropped == 1; }));
  for (const char* k : {"x", "y", "z"}) hints.hint(k, gone);
  EXPECT_EQ(hints.stats().dropped, 4u);
  EXPECT_EQ(hints.stats().sent, 0u);
  EXPECT_EQ(hints.stats().deduplicated, 0u);
}

}  // namespace
}  // namespace tierkv::server
