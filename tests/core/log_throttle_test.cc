// LogThrottle: one line per interval, and the count of the lines held back
// in between reported with the next line let through. Times are given.
#include "core/log_throttle.h"

#include <gtest/gtest.h>

namespace tierkv {
namespace {

constexpr uint64_t kSecond = 1'000'000'000;

TEST(LogThrottleTest, LetsTheFirstLineThroughAndHoldsTheRestOfTheInterval) {
  LogThrottle throttle(kSecond);
  ASSERT_EQ(throttle.admit(5 * kSecond), std::optional<uint64_t>(0));
  EXPECT_FALSE(throttle.admit(5 * kSecond).has_value());
  EXPECT_FALSE(throttle.admit(5 * kSecond + kSecond / 2).has_value());
  EXPECT_FALSE(throttle.admit(6 * kSecond - 1).has_value());
}

TEST(LogThrottleTest, TheNextLineAfterTheIntervalCarriesTheCountHeldBack) {
  LogThrottle throttle(kSecond);
  ASSERT_TRUE(throttle.admit(kSecond).has_value());
  for (int i = 0; i < 7; ++i) ASSERT_FALSE(throttle.admit(kSecond + i).has_value());
  EXPECT_EQ(throttle.admit(2 * kSecond), std::optional<uint64_t>(7));
  // The count starts again from there.
  EXPECT_FALSE(throttle.admit(2 * kSecond + 1).has_value());
  EXPECT_EQ(throttle.admit(4 * kSecond), std::optional<uint64_t>(1));
}

TEST(LogThrottleTest, ALineAtTimeZeroIsLetThrough) {
  // The first line passes whatever the clock says (no "last line" yet).
  LogThrottle throttle(kSecond);
  EXPECT_EQ(throttle.admit(0), std::optional<uint64_t>(0));
  EXPECT_FALSE(throttle.admit(0).has_value());
}

}  // namespace
}  // namespace tierkv
