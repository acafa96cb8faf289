// RespClient::send over pieces: the peer receives exactly their
// concatenation, whatever the pieces' sizes and count, through partial
// writes (the pieces add up to far more than a socket buffer).
#include "core/resp_client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/core/loopback_listener.h"

namespace tierkv {
namespace {

using Listener = testing::LoopbackListener;

// Everything the one accepted connection sends, until it closes.
std::string receive_all(int listener) {
  const int conn = ::accept(listener, nullptr, nullptr);
  std::string got;
  char buf[3000];
  for (ssize_t n; (n = ::recv(conn, buf, sizeof(buf), 0)) > 0;) got.append(buf, n);
  ::close(conn);
  return got;
}

TEST(RespClientSend, PiecesArriveInOrderWhole) {
  std::mt19937 rng(7);
  for (int round = 0; round < 4; ++round) {
    Listener listener;
    std::string got;
    std::thread reader([&] { got = receive_all(listener.fd); });
    // Empty pieces, 1-byte ones, and a few of megabytes; more than one
    // sendmsg can take at once.
    std::vector<std::string> pieces;
    std::string expected;
    for (int i = 0; i < 300; ++i) {
      const uint32_t kind = rng() % 10;
      const size_t size = kind == 0 ? 0 : kind < 8 ? rng() % 100 : rng() % (3 << 20);
      std::string p(size, '\0');
      for (char& c : p) c = static_cast<char>('a' + rng() % 26);
      expected += p;
      pieces.push_back(std::move(p));
    }
    std::vector<std::string_view> views(pieces.begin(), pieces.end());
    {
      Result<RespClient> client = RespClient::connect("127.0.0.1:" + std::to_string(listener.port));
      ASSERT_TRUE(client.is_ok()) << client.status().to_string();
      ASSERT_TRUE(client->send(std::span<const std::string_view>(views)).is_ok());
    }
    reader.join();
    ASSERT_EQ(got.size(), expected.size());
    EXPECT_TRUE(got == expected) << "round " << round;
  }
}

TEST(RespClientSend, AClosedPeerIsAnError) {
  Listener listener;
  std::thread closer([&] { ::close(::accept(listener.fd, nullptr, nullptr)); });
  Result<RespClient> client = RespClient::connect("127.0.0.1:" + std::to_string(listener.port));
  ASSERT_TRUE(client.is_ok());
  closer.join();
  const std::string big(8 << 20, 'x');
  std::vector<std::string_view> views(4, big);
  EXPECT_FALSE(client->send(std::span<const std::string_view>(views)).is_ok());
}

}  // namespace
}  // namespace tierkv
