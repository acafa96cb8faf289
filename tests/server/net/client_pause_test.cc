// ClientPause: which commands a pause holds, and how pauses combine.
#include "server/net/client_pause.h"

#include <gtest/gtest.h>

namespace tierkv::server {
namespace {

using Mode = ClientPause::Mode;

TEST(ClientPause, NothingHeldWithoutAPause) {
  ClientPause p;
  EXPECT_FALSE(p.active());
  EXPECT_EQ(p.holds_until(true), 0);
  EXPECT_EQ(p.holds_until(false), 0);
}

TEST(ClientPause, WriteHoldsOnlyWrites) {
  ClientPause p;
  int64_t end = ClientPause::now_ms() + 60'000;
  p.pause(end, Mode::kWrite);
  EXPECT_TRUE(p.active());
  EXPECT_EQ(p.holds_until(true), end);
  EXPECT_EQ(p.holds_until(false), 0);
  p.pause(end, Mode::kAll);
  EXPECT_EQ(p.holds_until(false), end);
  p.unpause();
  EXPECT_FALSE(p.active());
  EXPECT_EQ(p.holds_until(true), 0);
}

TEST(ClientPause, LaterEndWinsAndModeIsReplaced) {
  ClientPause p;
  int64_t now = ClientPause::now_ms();
  p.pause(now + 60'000, Mode::kAll);
  p.pause(now + 10, Mode::kWrite);  // as Redis: the mode changes, the end stays
  EXPECT_EQ(p.holds_until(true), now + 60'000);
  EXPECT_EQ(p.holds_until(false), 0);
}

TEST(ClientPause, EndedPauseHoldsNothing) {
  ClientPause p;
  p.pause(ClientPause::now_ms() - 1, Mode::kAll);
  EXPECT_EQ(p.holds_until(true), 0);
}

}  // namespace
}  // namespace tierkv::server
