// Deferred replies over a real socket with a flash tier: GETs streamed from
// flash stay in order within a pipeline, commands that read values find
// flash-only ones, durable writes are acknowledged once on flash, and
// several clients on several I/O threads do all this at once. Run under
// ThreadSanitizer in CI (the Store's callbacks run on flash threads).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "server/net/server.h"
#include "store/store.h"
#include "store/store_tiers.h"
#include "tests/server/net/unix_client.h"

// GCC 12 reports a false -Wrestrict on "literal" + std::string (GCC PR 105329).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

namespace tierkv::server {
namespace {

using testing::command;
using Client = testing::UnixClient;

std::string bulk(std::string_view s) {
  return "$" + std::to_string(s.size()) + "\r\n" + std::string(s) + "\r\n";
}

std::string random_value(std::mt19937_64& rng, size_t size) {
  std::string v(size, '\0');
  for (size_t i = 0; i < size; i += 8) {
    uint64_t r = rng();
    for (size_t j = i; j < std::min(size, i + 8); ++j, r >>= 8)
      v[j] = static_cast<char>('a' + (r & 0xff) % 26);
  }
  return v;
}

constexpr size_t kValueSize = 100 * 1024;  // two 64 KiB chunks
constexpr int kKeys = 120;                 // 12 MiB: three times the memory budget

// A server over a 4 MiB memory tier and a 64 MiB flash file.
class FlashServerTest : public ::testing::Test {
 protected:
  void start(FlashFsync fsync) {
    dir_ = std::filesystem::temp_directory_path() /
           ("tierkv-flash-replies-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    config_.port = 0;
    config_.metrics_port = 0;
    config_.io_threads = 2;
    config_.memory = int64_t{4} << 20;
    config_.chunk_size = 64 << 10;
    config_.flash_path = (dir_ / "flash.dat").string();
    config_.flash_size = int64_t{64} << 20;
    config_.region_size = int64_t{1} << 20;
    config_.flash_fsync = fsync;
    config_.unixsocket = (dir_ / "sock").string();
    auto store = Store::open(config_, &metrics_);
    ASSERT_TRUE(store.is_ok()) << store.status().to_string();
    store_ = std::move(*store);
    ASSERT_NE(StoreTiers::flash(*store_), nullptr) << store_->flash_status().error;
    server_ = std::make_unique<Server>(config_, *store_, metrics_);
    ASSERT_TRUE(server_->start().is_ok());
  }

  void TearDown() override {
    server_.reset();
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Writes kKeys values through the server; most end up only on flash.
  void fill(Client& c) {
    std::mt19937_64 rng(7);
    for (int i = 0; i < kKeys; ++i) {
      values_.push_back(random_value(rng, kValueSize));
      ASSERT_TRUE(c.send(command({"SET", key(i), values_.back()})));
      ASSERT_EQ(c.read_reply(), "+OK\r\n") << "SET " << key(i);
    }
  }

  // The first key whose whole value is only on flash.
  int flash_only_key() {
    for (int i = 0; i < kKeys; ++i) {
      std::optional<ObjectResidency> r = store_->residency(key(i));
      if (r && !r->in_memory && r->state == "flash") return i;
    }
    return -1;
  }

  static std::string key(int i) { return "key:" + std::to_string(i); }

  std::filesystem::path dir_;
  Config config_;
  MetricsRegistry metrics_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Server> server_;
  std::vector<std::string> values_;
};

TEST_F(FlashServerTest, PipelinedGetsFromFlashStayInOrder) {
  start(FlashFsync::kNone);
  Client c(config_.unixsocket);
  ASSERT_TRUE(c.connected());
  ASSERT_NO_FATAL_FAILURE(fill(c));
  ASSERT_GE(flash_only_key(), 0) << "nothing went to flash";
  uint64_t flash_hits_before = store_->stats().flash_hits;

  // One write: GET, PING, GET missing for every key.
  std::string pipeline;
  for (int i = 0; i < kKeys; ++i)
    pipeline += command({"GET", key(i)}) + command({"PING"}) + command({"GET", "absent"});
  ASSERT_TRUE(c.send(pipeline));
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_EQ(c.read_reply(), bulk(values_[static_cast<size_t>(i)])) << key(i);
    ASSERT_EQ(c.read_reply(), "+PONG\r\n");
    ASSERT_EQ(c.read_reply(), "$-1\r\n");
  }
  EXPECT_GT(store_->stats().flash_hits, flash_hits_before) << "no GET was answered from flash";
}

TEST_F(FlashServerTest, ValueReadingCommandsSeeFlashOnlyValues) {
  start(FlashFsync::kNone);
  Client c(config_.unixsocket);
  ASSERT_TRUE(c.connected());
  ASSERT_NO_FATAL_FAILURE(fill(c));
  int k = flash_only_key();
  ASSERT_GE(k, 0);
  const std::string& v = values_[static_cast<size_t>(k)];
  c.send(command({"STRLEN", key(k)}));
  EXPECT_EQ(c.read_reply(), ":" + std::to_string(v.size()) + "\r\n");
  c.send(command({"GETRANGE", key(k), "-5", "-1"}));
  EXPECT_EQ(c.read_reply(), bulk(v.substr(v.size() - 5)));
  c.send(command({"APPEND", key(k), "xyz"}));
  EXPECT_EQ(c.read_reply(), ":" + std::to_string(v.size() + 3) + "\r\n");
  c.send(command({"GET", key(k)}));
  EXPECT_EQ(c.read_reply(), bulk(v + "xyz"));

  int k2 = flash_only_key();
  ASSERT_GE(k2, 0);
  c.send(command({"MGET", key(k2), "absent"}));
  EXPECT_EQ(c.read_reply(), "*2\r\n");
  EXPECT_EQ(c.read_reply(), bulk(values_[static_cast<size_t>(k2)]));
  EXPECT_EQ(c.read_reply(), "$-1\r\n");

  int k3 = flash_only_key();
  ASSERT_GE(k3, 0);
  c.send(command({"GETDEL", key(k3)}));
  EXPECT_EQ(c.read_reply(), bulk(values_[static_cast<size_t>(k3)]));
  c.send(command({"EXISTS", key(k3)}));
  EXPECT_EQ(c.read_reply(), ":0\r\n");
}

TEST_F(FlashServerTest, TierStatShowsResidency) {
  start(FlashFsync::kNone);
  Client c(config_.unixsocket);
  ASSERT_TRUE(c.connected());
  ASSERT_NO_FATAL_FAILURE(fill(c));
  int k = flash_only_key();
  ASSERT_GE(k, 0);
  c.send(command({"TIER.STAT", key(k)}));
  std::string header = c.read_reply();
  ASSERT_EQ(header, "*12\r\n");  // six pairs
  std::vector<std::string> items;
  for (int i = 0; i < 10; ++i) items.push_back(c.read_reply());
  EXPECT_EQ(items[8], bulk("state"));
  EXPECT_EQ(items[9], bulk("flash"));
  EXPECT_EQ(c.read_reply(), bulk("chunk_residency"));
  EXPECT_EQ(c.read_reply(), "*2\r\n");
  for (int chunk = 0; chunk < 2; ++chunk) {
    EXPECT_EQ(c.read_reply(), "*14\r\n");
    std::vector<std::string> f;
    for (int i = 0; i < 14; ++i) f.push_back(c.read_reply());
    EXPECT_EQ(f[4], bulk("residency"));
    EXPECT_EQ(f[5], bulk("flash"));
    EXPECT_EQ(f[6], bulk("dirty"));
    EXPECT_EQ(f[7], ":0\r\n");
  }
}

TEST_F(FlashServerTest, DurableWritesAreOnFlashWhenAcknowledged) {
  start(FlashFsync::kAlways);
  Client c(config_.unixsocket);
  ASSERT_TRUE(c.connected());
  std::string pipeline;
  for (int i = 0; i < 20; ++i) pipeline += command({"SET", key(i), "value" + std::to_string(i)});
  pipeline += command({"MSET", "m1", "a", "m2", "b"}) + command({"INCR", "counter"});
  ASSERT_TRUE(c.send(pipeline));
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(c.read_reply(), "+OK\r\n");
    // Acknowledged: this version is indexed on flash.
    std::optional<ObjectResidency> r = store_->residency(key(i));
    ASSERT_TRUE(r.has_value());
    ASSERT_FALSE(r->chunks.empty());
    EXPECT_TRUE(r->chunks[0].on_flash) << key(i) << " state " << r->state;
  }
  ASSERT_EQ(c.read_reply(), "+OK\r\n");
  for (std::string_view k : {"m1", "m2"}) {
    std::optional<ObjectResidency> r = store_->residency(k);
    ASSERT_TRUE(r.has_value());
    EXPECT_TRUE(r->chunks[0].on_flash) << k;
  }
  ASSERT_EQ(c.read_reply(), ":1\r\n");
  EXPECT_TRUE(store_->residency("counter")->chunks[0].on_flash);
}

TEST_F(FlashServerTest, ManyClientsReadFlashAtOnce) {
  start(FlashFsync::kNone);
  {
    Client c(config_.unixsocket);
    ASSERT_TRUE(c.connected());
    ASSERT_NO_FATAL_FAILURE(fill(c));
  }
  constexpr int kClients = 4;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      Client c(config_.unixsocket);
      if (!c.connected()) {
        failures++;
        return;
      }
      // Each client walks the keys from its own starting point, in pipelines of 8.
      for (int round = 0; round < kKeys / 8; ++round) {
        std::string pipeline;
        std::vector<int> asked;
        for (int j = 0; j < 8; ++j) {
          int k = (t * 37 + round * 8 + j) % kKeys;
          asked.push_back(k);
          pipeline += command({"GET", key(k)});
        }
        if (!c.send(pipeline)) failures++;
        for (int k : asked) {
          if (c.read_reply() != bulk(values_[static_cast<size_t>(k)])) failures++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(store_->stats().flash_hits, 0u);
}

// Clients that leave in the middle of a streamed GET (their reads are
// cancelled and give their buffers back) while others run value-reading
// commands on flash-only keys and a writer keeps memory full: every reply is
// right or a clear -BUSY / -OOM, and no read buffer stays held.
TEST_F(FlashServerTest, ClientsLeavingMidStreamAndValueCommandsUnderPressure) {
  config_.flash_read_window = 1;
  start(FlashFsync::kNone);
  {
    Client c(config_.unixsocket);
    ASSERT_TRUE(c.connected());
    ASSERT_NO_FATAL_FAILURE(fill(c));
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        Client c(config_.unixsocket);  // closed at the end of the iteration
        if (!c.connected() || !c.send(command({"GET", key((t * 13 + i) % kKeys)}))) failures++;
      }
    });
  }
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      Client c(config_.unixsocket);
      for (int i = 0; i < 30; ++i) {
        int k = (t * 7 + i * 3) % kKeys;
        const std::string& v = values_[static_cast<size_t>(k)];
        c.send(command({"GETRANGE", key(k), "0", "9"}) + command({"STRLEN", key(k)}));
        std::string range = c.read_reply();
        std::string len = c.read_reply();
        bool clear_error = range.starts_with("-BUSY") || range.starts_with("-OOM");
        if (range != bulk(v.substr(0, 10)) && !clear_error) failures++;
        if (len != ":" + std::to_string(v.size()) + "\r\n") failures++;
      }
    });
  }
  threads.emplace_back([&] {
    Client c(config_.unixsocket);
    std::string filler(48 * 1024, 'p');
    for (int i = 0; i < 60; ++i) {
      c.send(command({"SET", "press:" + std::to_string(i % 40), filler}));
      if (c.read_reply() != "+OK\r\n") failures++;
    }
  });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  // Every cancelled or finished read gave its buffers back.
  for (int i = 0; i < 500 && store_->stats().flash_read_buffer_used != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(store_->stats().flash_read_buffer_used, 0);
  Client c(config_.unixsocket);
  c.send(command({"PING"}));
  EXPECT_EQ(c.read_reply(), "+PONG\r\n");
}

TEST_F(FlashServerTest, InfoHasAFlashSection) {
  start(FlashFsync::kNone);
  Client c(config_.unixsocket);
  ASSERT_TRUE(c.connected());
  ASSERT_NO_FATAL_FAILURE(fill(c));
  c.send(command({"INFO", "flash"}));
  std::string info = c.read_reply();
  EXPECT_NE(info.find("# Flash\r\n"), std::string::npos);
  EXPECT_NE(info.find("flash_enabled:1\r\n"), std::string::npos);
  EXPECT_NE(info.find("flash_path:" + config_.flash_path + "\r\n"), std::string::npos);
  EXPECT_EQ(info.find("flash_objects:0\r\n"), std::string::npos) << "offloads reached flash";
  EXPECT_EQ(info.find("# Memory"), std::string::npos) << "only the section asked for";
  c.send(command({"INFO", "all"}));
  EXPECT_NE(c.read_reply().find("# Flash\r\n"), std::string::npos);
}

}  // namespace
}  // namespace tierkv::server
