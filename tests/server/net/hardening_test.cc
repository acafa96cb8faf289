#include "server/net/hardening.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cerrno>

namespace tierkv::server {
namespace {

asio::ip::address addr(const char* text) {
  return asio::ip::make_address(text);
}

TEST(HardeningTest, LoopbackPeers) {
  for (const char* a : {"127.0.0.1", "127.0.0.2", "127.255.255.254", "::1", "::ffff:127.0.0.1"})
    EXPECT_TRUE(peer_is_loopback(addr(a))) << a;
  for (const char* a : {"10.0.0.1", "192.0.2.2", "0.0.0.0", "::", "fd00::2", "::ffff:10.0.0.1"})
    EXPECT_FALSE(peer_is_loopback(addr(a))) << a;
}

TEST(HardeningTest, ProtectedModeRefusesOnlyRemotePeersWithoutPassword) {
  asio::ip::address remote = addr("192.0.2.2");
  EXPECT_TRUE(protected_mode_refuses(true, false, remote));
  EXPECT_FALSE(protected_mode_refuses(true, true, remote));    // a password is set
  EXPECT_FALSE(protected_mode_refuses(false, false, remote));  // protected-mode no
  EXPECT_FALSE(protected_mode_refuses(true, false, addr("127.0.0.1")));
  EXPECT_FALSE(protected_mode_refuses(true, false, addr("::1")));
}

TEST(HardeningTest, DeniedTextIsRedisSingleLineError) {
  EXPECT_TRUE(kProtectedModeDenied.starts_with("-DENIED Redis is running in protected mode"));
  EXPECT_TRUE(kProtectedModeDenied.ends_with("from the outside.\r\n"));
  EXPECT_EQ(kProtectedModeDenied.find("\r\n"), kProtectedModeDenied.size() - 2);
}

TEST(HardeningTest, FdReserveCountsMetricsClientsAndThreads) {
  Config c;
  c.io_threads = 3;
  c.metrics_max_clients = 10;
  EXPECT_EQ(fd_reserve(c), 32 + 10 + 12);
}

TEST(HardeningTest, FitOpenFilesKeepsWhatFitsAndReportsWhatDoesNot) {
  rlimit now{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &now), 0);
  OpenFilesFit small = fit_open_files(10, 32);
  EXPECT_EQ(small.maxclients, 10);
  EXPECT_EQ(small.raise_errno, 0);
  if (now.rlim_max == RLIM_INFINITY) return;  // nothing below can fail
  // Far past the hard limit, without privilege to raise it: what fits.
  int64_t huge = static_cast<int64_t>(now.rlim_max) + 100000;
  OpenFilesFit fit = fit_open_files(huge, 32);
  if (fit.raise_errno == 0) {  // running with CAP_SYS_RESOURCE: it was raised
    EXPECT_EQ(fit.maxclients, huge);
  } else {
    EXPECT_EQ(fit.raise_errno, EPERM);
    EXPECT_EQ(fit.limit, static_cast<uint64_t>(now.rlim_max));
    EXPECT_EQ(fit.maxclients, static_cast<int64_t>(now.rlim_max) - 32);
  }
}

TEST(HardeningTest, AcceptErrorsThatRepeatPause) {
  for (int e : {EMFILE, ENFILE, ENOBUFS, ENOMEM, EINVAL})
    EXPECT_TRUE(accept_error_pauses(asio::error_code(e, asio::system_category()))) << e;
  for (int e : {ECONNABORTED, EPROTO, EPERM, ENETUNREACH, EAGAIN})
    EXPECT_FALSE(accept_error_pauses(asio::error_code(e, asio::system_category()))) << e;
}

}  // namespace
}  // namespace tierkv::server
