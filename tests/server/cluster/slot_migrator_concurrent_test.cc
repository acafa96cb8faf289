// SlotMigrator against two fake targets, on several streams at once: every
// key of a moving slot ends at its slot's target with its exact value and
// leaves this store; keys of other slots stay. The targets refuse some SETs
// (-IOERR: the key stays and goes again) and cut a connection mid-batch
// (the keys in doubt go again), so the retry paths race the other streams.
// Run under TSan (label "concurrent").
#include "server/cluster/slot_migrator.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cluster/key_slot.h"
#include "server/protocol/resp_parser.h"
#include "tests/core/loopback_listener.h"

namespace tierkv::server {
namespace {

using std::chrono::milliseconds;

// A RESP server that takes ASKING, AUTH, CLIENT and SET, and keeps what it
// was sent. The first `refusals` SETs are answered -IOERR (and not kept);
// the connection that receives SET number `cut_at` is closed right after
// it is kept, before any reply to it.
class FakeTarget {
 public:
  FakeTarget(int refusals, int cut_at) : refusals_(refusals), cut_at_(cut_at) {
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~FakeTarget() {
    ::shutdown(listener_.fd, SHUT_RDWR);
    acceptor_.join();
    {
      std::lock_guard lock(mu_);
      for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& t : connections_) t.join();
  }
  uint16_t port() const { return listener_.port; }
  std::map<std::string, std::string> held() const {
    std::lock_guard lock(mu_);
    return held_;
  }

 private:
  void accept_loop() {
    for (;;) {
      const int fd = ::accept(listener_.fd, nullptr, nullptr);
      if (fd < 0) return;
      std::lock_guard lock(mu_);
      open_.push_back(fd);
      connections_.emplace_back([this, fd] { serve(fd); });
    }
  }

  void serve(int fd) {
    RespParser parser;
    for (bool open = true; open;) {
      std::span<char> space = parser.prepare();
      const ssize_t n = ::recv(fd, space.data(), space.size(), 0);
      if (n <= 0) break;
      parser.commit(static_cast<size_t>(n));
      std::string replies;
      for (RespParser::Event e; open && (e = parser.next()) != RespParser::Event::kNeedMore;) {
        if (e == RespParser::Event::kLargeValue) {
          parser.buffer();
        } else if (e == RespParser::Event::kCommand) {
          open = answer(parser.argv(), replies);
        } else {
          ADD_FAILURE() << "the migrator sent bad RESP: " << parser.error();
          open = false;
        }
      }
      if (open && !replies.empty() && ::send(fd, replies.data(), replies.size(), MSG_NOSIGNAL) < 0)
        break;
    }
    ::shutdown(fd, SHUT_RDWR);
  }

  // False: cut the connection now.
  bool answer(const std::vector<std::string_view>& argv, std::string& replies) {
    if (argv[0] != "SET") {
      replies += "+OK\r\n";
      return true;
    }
    std::lock_guard lock(mu_);
    const int n = ++sets_;
    if (n <= refusals_) {
      replies += "-IOERR the flash device failed\r\n";
      return true;
    }
    held_[std::string(argv[1])] = std::string(argv[2]);
    if (n == cut_at_) return false;
    replies += "+OK\r\n";
    return true;
  }

  const int refusals_, cut_at_;
  testing::LoopbackListener listener_;
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<int> open_;
  std::vector<std::thread> connections_;
  std::map<std::string, std::string> held_;
  int sets_ = 0;
};

std::string value_of(std::mt19937& rng, size_t i) {
  // Mostly small; some past batch_bytes (they stream alone, in pieces).
  const size_t size = rng() % 8 == 0 ? 40'000 + rng() % 100'000 : 1 + rng() % 3'000;
  std::string v(size, '\0');
  for (size_t j = 0; j < size; ++j) v[j] = static_cast<char>('a' + (i * 31 + j) % 26);
  return v;
}

TEST(SlotMigratorConcurrentTest, EveryMovingKeyReachesItsTargetOnce) {
  Config config;
  config.flash_size = 0;
  config.memory = int64_t{256} << 20;
  auto store = Store::open(config);
  ASSERT_TRUE(store.is_ok());
  FakeTarget t1(/*refusals=*/5, /*cut_at=*/40), t2(/*refusals=*/0, /*cut_at=*/25);

  cluster::SlotMap map;
  map.set_version(7);
  const size_t self = map.upsert_node({"self", "127.0.0.1", 1});
  const size_t to1 = map.upsert_node({"t1", "127.0.0.1", t1.port()});
  const size_t to2 = map.upsert_node({"t2", "127.0.0.1", t2.port()});
  for (uint32_t s = 0; s < cluster::kSlotCount; ++s) map.set_owner(static_cast<uint16_t>(s), self);
  // A third of the slots move to t1, a third to t2; the rest stay.
  auto destination = [&](uint16_t slot) {
    return slot % 3 == 0 ? to1 : slot % 3 == 1 ? to2 : cluster::SlotMap::kNoNode;
  };
  for (uint32_t s = 0; s < cluster::kSlotCount; ++s) {
    const auto slot = static_cast<uint16_t>(s);
    if (destination(slot) != cluster::SlotMap::kNoNode) map.set_moving(slot, destination(slot));
  }

  std::mt19937 rng(36);
  std::map<std::string, std::string> model;
  for (size_t i = 0; i < 1500; ++i) {
    std::string key = "k" + std::to_string(i);
    std::string value = value_of(rng, i);
    ASSERT_TRUE((*store)->put(key, value).is_ok());
    model[key] = std::move(value);
  }

  auto fence = std::make_shared<KeyFence>();
  Counter keys_out;
  SlotMigratorOptions o;
  o.etcd_endpoints = {"http://127.0.0.1:1"};  // nothing there: reports fail, moves go on
  o.cluster_name = "t";
  o.self_id = "self";
  o.batch_keys = 16;
  o.streams = 3;
  o.send.batch_bytes = 32 << 10;
  o.send.piece_bytes = 8 << 10;
  o.send.io_timeout = milliseconds(5000);
  o.etcd_timeout = milliseconds(200);
  {
    SlotMigrator migrator(**store, *fence, keys_out, o);
    migrator.on_map(map);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (migrator.stats().passes == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(milliseconds(20));
    ASSERT_GE(migrator.stats().passes, 1u) << "the pass did not finish";
    EXPECT_GE(migrator.stats().retries, 2u);  // the refusals and the cuts went again
    EXPECT_EQ(migrator.stats().keys_dropped, 0u);
  }

  const std::map<std::string, std::string> at1 = t1.held(), at2 = t2.held();
  size_t moved = 0;
  for (const auto& [key, value] : model) {
    const size_t to = destination(cluster::key_slot(key));
    const bool here = (*store)->exists(key);
    if (to == cluster::SlotMap::kNoNode) {
      EXPECT_TRUE(here) << key << " does not move, yet left";
      EXPECT_FALSE(at1.contains(key) || at2.contains(key)) << key << " does not move";
      continue;
    }
    ++moved;
    EXPECT_FALSE(here) << key << " moved, yet is still here";
    const std::map<std::string, std::string>& right = to == to1 ? at1 : at2;
    const std::map<std::string, std::string>& wrong = to == to1 ? at2 : at1;
    auto it = right.find(key);
    ASSERT_NE(it, right.end()) << key << " never reached its target";
    EXPECT_TRUE(it->second == value) << key << " arrived with another value";
    EXPECT_FALSE(wrong.contains(key)) << key << " reached the other target";
  }
  EXPECT_EQ(keys_out.value(), moved);
  EXPECT_EQ(at1.size() + at2.size(), moved);
  EXPECT_GT(moved, 900u);
}

}  // namespace
}  // namespace tierkv::server
